// The program's own writes into host memory that a device may read in place: graph inputs
// (GGML_TENSOR_FLAG_INPUT) in host buffers. llama.cpp fills several inputs with plain stores into
// tensor->data (kq_mask, k_idxs, ...), which no ggml call sees; an integrated GPU reads them from
// host memory when its queue runs the graph. GGML_TRACE_HOST_WRITES picks how they are learnt:
//   infer    (default) every host input a hooked call did not write is taken as written just before
//            each scheduler graph compute: a host_write record flagged inferred. No cost but a few
//            records a graph.
//   observe  the inputs' bytes are kept after each graph compute and compared at the next compute
//            and at every host-blocking call: a host_write record for the bytes that changed, with
//            the window they changed in [t_begin, t_end]. Costs a copy and a compare of the inputs.
//   off      neither.
// docs/integrated.md.
#pragma once

#include "ggml-backend-impl.h"

namespace ggml_trace {

void host_writes_init();  // reads GGML_TRACE_HOST_WRITES (start-up)

// A hooked call (a buffer's set_tensor) wrote t: it needs no inferring or observing.
void host_writes_noted(const ggml_tensor * t);

// A scheduler graph compute begins (writes so far are the graph's inputs) and returned (observe:
// its inputs are kept to compare).
void host_writes_before_compute(ggml_cgraph * graph);
void host_writes_after_compute(ggml_cgraph * graph);

// A host-blocking call begins (observe: changes so far happened before it) and ended.
void host_writes_before_wait();
void host_writes_after_wait();

// The scheduler may reallocate or the program free what is kept: compare once more and forget it.
void host_writes_forget();

}  // namespace ggml_trace
