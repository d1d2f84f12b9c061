// CUDA streams mode (GGML_TRACE_CUDA_STREAMS=1, `record --cuda-streams`): what ggml-cuda does below
// the backend interface, one CUDA record per runtime call, in the order the host issued them.
//
// Through CUPTI's callback API (libcupti opened at run time, as in CUPTI mode): kernel launches,
// async copies and memsets with the stream they went to, cudaEventRecord and cudaStreamWaitEvent
// with their event and stream, the host's event, stream and device synchronizations (entry and
// return, so that a call that never returns shows), stream capture's begin and end, and every CUDA
// graph launch. A call issued while its stream was capturing is marked: it became a node of a CUDA
// graph and ran later, in that graph's launches, in the order the capture recorded.
//
// A kernel, copy or memset issued inside a split's graph_compute names the ggml node it computes:
// the first node, in the order the backend runs them, at or after the last one named, whose bytes
// one of the launch's pointer arguments points into (docs/trace-format.md, REC_CUDA).
#pragma once
#include "ggml.h"

namespace ggml_trace {

// Subscribes to CUPTI's callbacks when GGML_TRACE_CUDA_STREAMS is set; says on stderr (and as META
// "cuda_streams") why not when it cannot.
void cuda_calls_start();
bool cuda_calls_active();

// Whether the graph_compute running on this thread issued kernels, copies or memsets of its own so far
// (a CUDA graph's replay issues none: its nodes' order is its capture's).
bool cuda_split_issued_work();

// While one lives, the calling thread is running `graph` on a backend (a split, or a meta backend's
// part of one): the CUDA launches made meanwhile are tied to its nodes. Null: nothing to tie to.
struct SplitGraphScope {
    explicit SplitGraphScope(ggml_cgraph * graph);
    ~SplitGraphScope();
    SplitGraphScope(const SplitGraphScope &) = delete;
    SplitGraphScope & operator=(const SplitGraphScope &) = delete;

  private:
    ggml_cgraph * outer_;
    bool active_;  // CUDA streams mode was on when it began
};

}  // namespace ggml_trace
