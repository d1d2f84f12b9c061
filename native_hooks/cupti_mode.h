// CUPTI mode for CUDA (GGML_TRACE_CUPTI=1 or graphs, kernels): kernel, CUDA graph, memcpy and memset
// activity records, each tied to the traced call that launched it.
//
// libcupti is opened at run time: the hooks build without it, and a program runs the same whether
// it is there or not. The hooks push each traced call's id as a CUPTI external correlation id
// around the call, so every CUDA API call made inside it (a graph launch, a cudaMemcpyAsync) and
// the device activity it starts carry that id. Activity times come from CUPTI on our clock
// (CLOCK_MONOTONIC, through cuptiActivityRegisterTimestampCallback) and go into REC_GPU records.
#pragma once
#include <stdint.h>

namespace ggml_trace {

// Loads CUPTI and enables activity collection when GGML_TRACE_CUPTI is set; says on stderr why
// not when it cannot (and writes the reason as META "cupti").
void cupti_start();
bool cupti_active();
// libcupti, opened once (GGML_TRACE_CUPTI_LIB, else the usual names); null when there is none. Also
// the CUDA streams mode's (cuda_calls.h).
void * cupti_library();
// A communicator that launches its kernels through the driver API (NCCL) was made: from now on the
// driver API's records too, which tie those kernels to the traced calls (once; "kernels" mode has them).
void cupti_need_driver_api();
void cupti_push(uint64_t call_id);
void cupti_pop();
// Hands every buffered activity record to the trace (at scheduler free and at exit).
void cupti_flush();

}  // namespace ggml_trace
