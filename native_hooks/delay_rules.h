// Delay rules (GGML_TRACE_DELAY, `ggml-trace record --delay`): parsing and matching. No ggml here:
// the hooks describe an operation with a DelayQuery, and delay.cpp injects what matched. The
// writer benchmark links this file alone to time the rules on the hot path.
//
// One rule: BACKEND:KIND[,KEY=VALUE...]:MICROSECONDS (docs/delay.md), several separated by ';'.
// BACKEND names the backend whose call it is (a copy's destination); the delay acts on the queue
// that runs the operation, which for a copy between two asynchronous backends is the source's:
// src= selects a copy by its source, queue= an operation by the queue it runs on.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <atomic>

namespace ggml_trace {

const int MAX_DELAY_RULES = 32;
const int64_t DELAY_ANY = -1;             // an unset range bound
const double MAX_DELAY_US = 60e6;         // a minute: longer is a typo, not a delay

struct DelayRule {
    char text[160];          // the rule as written
    char backend[64];        // name prefix; "" = any backend
    int kind;                // CallKind, or -1 = any of the kinds below
    int64_t graph_lo, graph_hi, split_lo, split_hi, nth_lo, nth_hi;  // inclusive; DELAY_ANY = any
    char op[32];             // ggml op name (upper case); "" = any
    int op_id;               // its enum ggml_op value, once resolved against the program's ggml
    char tensor[96];         // glob on a tensor name (glob_match); "" = any
    char src[64];            // src=: a copy's source backend, name prefix; "" = any
    char queue[64];          // queue=: the backend whose queue runs the operation, name prefix; "" = any
    uint64_t seed;
    bool random;             // rand:MAX: uniform in [0, us]
    double us;               // the delay, or the bound for rand
    std::atomic<uint64_t> matched;  // operations this rule selected so far (nth, rand draws)
};

// Whether `name` matches the shell-style `glob` as fnmatch(glob, name, 0) does: `*`, `?`,
// `[a-z]`, `[!x]` (or `[^x]`), `\` escaping the next character. Ours: Windows has no fnmatch.
bool glob_match(const char * glob, const char * name);

// What the hooks know of an operation about to be enqueued.
struct DelayQuery {
    uint8_t kind;              // CallKind
    uint32_t graph;            // NONE32 outside a scheduler graph
    int32_t split;             // -1 outside a split
    const char * backend_name;
    int op_first, op_last;     // ggml op of a compute's first and last node, -1 otherwise
    // Whether a tensor the operation reads or writes has a name matching `glob` (null: none).
    bool (*has_tensor)(const void * ctx, const char * glob);
    const void * ctx;
    const char * source_name;  // a copy's source backend (null: not a copy)
    const char * queue_name;   // the backend whose queue runs the operation (null: backend_name's)
};

struct DelayHit {
    int rule;
    uint64_t ns;
    uint64_t n;  // the rule's match number (0-based)
};

extern DelayRule g_delay_rules[MAX_DELAY_RULES];
extern int g_delay_n_rules;
// Set once at start when rules are in effect: the hooks' only cost without rules is this test.
extern bool g_delay_on;
inline bool delay_on() { return __builtin_expect(g_delay_on, 0); }

// Parses `text` (rules separated by ';') into g_delay_rules. On error returns false with a
// one-line reason in `err` and leaves no rule in effect.
bool delay_parse(const char * text, char * err, size_t err_len);
// Call-kind name as the trace names it ("graph_compute", ...) -> CallKind, or -1.
int delay_kind_of(const char * name);

// Whether rule `r` names the backend `name` (its BACKEND is a prefix of it, or any).
bool delay_rule_names(const DelayRule & r, const char * name);
// Whether rule `r` may act on `name`'s queue: its queue= or, without one, its BACKEND (a copy rule
// naming a destination also acts on the queues of the copies' sources).
bool delay_rule_may_act_on(const DelayRule & r, const char * name);
// One line on which queue rule `r` acts (for the note each rule gets on stderr at start).
void delay_rule_queue_words(const DelayRule & r, char * out, size_t n);

// The rules that select `q`, in rule order (each rule counts its own matches). Returns how many.
int delay_match(const DelayQuery & q, DelayHit * hits, int max_hits);

// Sleeps `ns` nanoseconds, to within a few microseconds (sleeps, then spins the last stretch).
void delay_sleep_ns(uint64_t ns);

}  // namespace ggml_trace
