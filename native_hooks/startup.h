// Start-up: the trace file opens on the first call that needs it (a ggml entry point, or a user
// mark from a process that has not loaded ggml yet), with what the trace says of the process and
// its build; then the hooks check this program's ggml and capture begins.
#pragma once

namespace ggml_trace {

// Opens the trace named by GGML_TRACE_OUTPUT, once; false when not tracing.
bool writer_ready();
// The first call into ggml: resolves ggml's API, checks its layout; true when capturing can begin.
bool active();
// A user mark or range may be recorded (tracing, and not paused).
bool user_capturing();

}  // namespace ggml_trace
