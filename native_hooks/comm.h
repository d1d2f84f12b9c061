// A backend's own allreduce for tensor parallelism. A backend registry may offer
// ggml_backend_comm_init / _allreduce_tensor / _free (CUDA: NCCL or its internal pipeline), which
// the meta backend looks up through ggml_backend_reg_get_proc_address and prefers to its own
// butterfly of copies and ADDs. We patch each registry's get_proc_address so that the meta backend
// gets our wrappers: the init is written down (META comm.init.N) and every allreduce call is
// recorded (K_COMM_ALLREDUCE, one record per device; a declined call has no accesses). See
// docs/tensor-parallel.md.
#pragma once
#include <stdint.h>

#include "ggml-backend-impl.h"

namespace ggml_trace {

const int COMM_MAX_DEVICES = 16;  // GGML_BACKEND_META_MAX_DEVICES

// One communicator, as the registry's comm_init made it.
struct CommGroup {
    void * ctx = nullptr;
    ggml_backend_reg_t reg = nullptr;
    bool (*allreduce)(void *, ggml_tensor **) = nullptr;  // the registry's own (looked up after init)
    int n = 0;
    ggml_backend_t backends[COMM_MAX_DEVICES];
};

// Patches the get_proc_address of every registry ggml knows now (idempotent). Called before a
// backend is created, so that a meta backend made from here on finds our wrappers.
void comm_patch_registries();

}  // namespace ggml_trace
