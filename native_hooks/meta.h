// Tensor parallelism: the "meta" backend (ggml-backend-meta.cpp) and its simple backends. See
// docs/tensor-parallel.md.
//
// A call to a meta backend (or to a buffer of the meta device) is recorded as a *parent* range:
// flags bit 5, no accesses of its own and no queue. The calls it makes on its simple backends are
// recorded as usual, keep the scheduler's graph and split, and each gets a NEST record naming its
// parent, the device index, the meta subgraph and its role (main, zero, copy, reduce, ...).
#pragma once
#include <stdint.h>

#include "ggml-backend-impl.h"
#include "trace_format.h"

namespace ggml_trace {

// Appends to `backends` (n entries, room for cap) the simple backends of every meta backend in
// it, with their default buffer types in `bufts`, so that they are patched even where
// ggml_backend_dev_init does not go through the PLT. Returns the new count.
int meta_expand(ggml_backend_t * backends, ggml_backend_buffer_type_t * bufts, int n, int cap);

bool meta_nested();                          // inside a meta parent call on this thread
bool meta_parent_call(uint64_t call_id);     // call_id is the innermost open parent

// Opens a parent range for call_id when `backend` is a meta backend (or `buffer` a meta buffer).
struct MetaParent {
    bool on = false;
    MetaParent(uint64_t call_id, ggml_backend_t backend);
    MetaParent(uint64_t call_id, ggml_backend_buffer_t buffer);
    ~MetaParent();
};

void meta_note_compute(const ggml_cgraph * graph);   // role of the nested compute about to commit
void meta_note_alloc(ggml_backend_buffer_t buffer);  // a buffer allocated inside a meta compute
// Called by every call as it commits: flags a parent, writes the NEST record of a nested call.
void meta_commit(CallRec & r);
// A name for a tensor without one (the allreduce temporaries), 0 when there is nothing to say.
uint64_t meta_unnamed(const ggml_tensor * t);

}  // namespace ggml_trace
