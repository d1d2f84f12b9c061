// Delay injection (GGML_TRACE_DELAY): stalls chosen operations on purpose, to find out whether a
// latent race is real. Rules and matching: delay_rules.h. Where the delay acts:
//   - a virtual device: its worker queue stalls before the operation (the host does not wait);
//   - CUDA: the backend's stream waits for a sleeping host function enqueued, after the stream's
//     work so far, on a private stream of the same device (the host does not wait);
//   - any other backend with a queue of its own (Vulkan, RPC, ...): a chain of matrix products sized to
//     take the delay there is enqueued on it before the operation (delay_work.h; the host does not wait);
//   - the CPU, or a backend the products cannot run on: the calling thread sleeps (delays submission only).
// Each delay is a K_DELAY record naming the target call; see trace_format.h.
#pragma once
#include "delay_rules.h"
#include "ggml-backend-impl.h"
#include "trace_format.h"

namespace ggml_trace {

// Reads GGML_TRACE_DELAY. A rule that does not parse: says why on stderr and exits (status 2),
// since a run without the delays asked for would answer the wrong question.
void delay_init(bool tracing);
// Once the trace is open: writes META delay.rules and puts the rules in effect.
void delay_start();
// A backend seen for the first time (`own`: its vtable before the hooks patched it): where a rule may
// select it and it has no queue or stream delay of its own, sizes its device-side delays
// (delay_work.h) while it is idle. Called without the hooks' locks held.
void delay_prepare(ggml_backend_t backend, uint32_t index, const ggml_backend_i & own);

// Before the operation of `call` (kind, graph, split and call_id filled in) is enqueued on
// `backend` (trace index `index`, original vtable `orig`): injects what the rules select.
// `graph` for computes; `a`, `b` the tensors of copies (either may be null). A host delay moves
// call.t_begin past its sleep, so the call's interval stays the call's own. Rules match the name of
// `named` when given (a peer copy: the destination, whose call it is in the trace, while the copy
// runs on the source's queue), else of `backend`; src= the name of `source` (a copy's), queue= the
// name of `backend`, the queue the delay acts on and its record names.
void delay_before(CallRec & call, ggml_backend_t backend, uint32_t index, const ggml_backend_i & orig,
                  ggml_cgraph * graph, const ggml_tensor * a, const ggml_tensor * b,
                  ggml_backend_t named = nullptr, ggml_backend_t source = nullptr);

}  // namespace ggml_trace
