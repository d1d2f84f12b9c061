#include "delay_rules.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trace_format.h"

namespace ggml_trace {

namespace {

// A bracket expression at `p` (just after its '['): whether it holds `c`, and where it ends (null
// when unclosed: the '[' is then an ordinary character, as fnmatch takes it).
const char * bracket(const char * p, char c, bool * hit) {
    bool negate = *p == '!' || *p == '^';
    p += negate;
    bool in = false;
    for (bool first = true; first || *p != ']'; first = false) {
        if (!*p) return nullptr;
        char lo = *p == '\\' && p[1] ? *++p : *p;
        char hi = lo;
        if (p[1] == '-' && p[2] && p[2] != ']') {
            hi = p[2] == '\\' && p[3] ? p[3] : p[2];
            p += p[2] == '\\' && p[3] ? 3 : 2;
        }
        in = in || ((unsigned char) c >= (unsigned char) lo && (unsigned char) c <= (unsigned char) hi);
        p++;
    }
    *hit = in != negate;
    return p + 1;
}

}  // namespace

bool glob_match(const char * g, const char * s) {
    const char * star_g = nullptr;  // the last '*' seen, and where its match would go on from
    const char * star_s = nullptr;
    while (*s) {
        bool hit = false;
        const char * next = nullptr;
        if (*g == '*') {
            star_g = ++g;
            star_s = s;
            continue;
        }
        if (*g == '?') {
            hit = true, next = g + 1;
        } else if (*g == '[' && (next = bracket(g + 1, *s, &hit))) {
        } else if (*g) {
            char lit = *g == '\\' && g[1] ? g[1] : *g;
            hit = lit == *s;
            next = g + (*g == '\\' && g[1] ? 2 : 1);
        }
        if (hit) {
            g = next, s++;
        } else if (star_g) {  // the last '*' takes one more character
            g = star_g, s = ++star_s;
        } else {
            return false;
        }
    }
    while (*g == '*') g++;
    return !*g;
}

DelayRule g_delay_rules[MAX_DELAY_RULES];
int g_delay_n_rules = 0;
bool g_delay_on = false;

namespace {

struct KindName {
    const char * name;
    int kind;
};
// The operations a delay can precede: those that go to a backend's queue.
const KindName KINDS[] = {
    {"graph_compute", K_GRAPH_COMPUTE},         {"cpy_tensor_async", K_CPY_TENSOR_ASYNC},
    {"set_tensor_async", K_SET_TENSOR_ASYNC},   {"get_tensor_async", K_GET_TENSOR_ASYNC},
    {"set_tensor_2d_async", K_SET_TENSOR_2D_ASYNC}, {"get_tensor_2d_async", K_GET_TENSOR_2D_ASYNC},
    {"event_record", K_EVENT_RECORD},           {"event_wait", K_EVENT_WAIT},
    {"synchronize", K_SYNCHRONIZE},             {"comm_allreduce", K_COMM_ALLREDUCE},
};

// Parses "N" or "A-B" (non-negative integers) into lo/hi.
bool parse_range(const char * v, int64_t * lo, int64_t * hi) {
    char * end;
    if (!isdigit((unsigned char) *v)) return false;
    *lo = strtoll(v, &end, 10);
    *hi = *lo;
    if (*end == '-') {
        if (!isdigit((unsigned char) end[1])) return false;
        *hi = strtoll(end + 1, &end, 10);
    }
    return *end == '\0' && *hi >= *lo;
}

bool parse_us(const char * v, double * us) {
    char * end;
    if (!*v || strspn(v, "0123456789.") != strlen(v)) return false;  // no exponents, no hex
    *us = strtod(v, &end);
    return *end == '\0' && *us > 0 && *us <= MAX_DELAY_US;
}

bool fail(char * err, size_t n, const char * rule, const char * why) {
    snprintf(err, n, "bad delay rule '%s': %s", rule, why);
    return false;
}

// Fills `r` from one rule; false with the reason in err.
bool parse_rule(const char * text, DelayRule & r, char * err, size_t n) {
    char buf[sizeof(r.text)];
    if (strlen(text) >= sizeof(buf)) return fail(err, n, text, "longer than 159 characters");
    strcpy(buf, text);
    snprintf(r.text, sizeof(r.text), "%s", text);
    r.kind = -1;
    r.graph_lo = r.graph_hi = r.split_lo = r.split_hi = r.nth_lo = r.nth_hi = DELAY_ANY;
    r.op[0] = r.tensor[0] = r.backend[0] = r.src[0] = r.queue[0] = '\0';
    r.op_id = -1;
    r.seed = 0;
    r.random = false;
    r.matched.store(0);

    // BACKEND : KIND[,keys] : US   (US may itself be "rand:MAX", so it is split off the end)
    char * c1 = strchr(buf, ':');
    char * last = strrchr(buf, ':');
    if (!c1 || c1 == last) return fail(err, n, text, "expected BACKEND:KIND[,KEY=VALUE...]:MICROSECONDS");
    *c1 = '\0';
    char * us = last + 1;
    *last = '\0';
    size_t mid_len = strlen(c1 + 1);
    if (mid_len >= 5 && strcmp(c1 + 1 + mid_len - 5, ":rand") == 0) {
        r.random = true;
        c1[1 + mid_len - 5] = '\0';
    } else if (strcmp(c1 + 1, "rand") == 0 || strchr(c1 + 1, ':')) {
        return fail(err, n, text, "expected BACKEND:KIND[,KEY=VALUE...]:MICROSECONDS");
    }
    if (!parse_us(us, &r.us)) return fail(err, n, text, "the delay must be a number of microseconds > 0 and <= 60000000, or rand:MAX");

    if (!buf[0]) return fail(err, n, text, "no backend (use * for any)");
    if (strlen(buf) >= sizeof(r.backend)) return fail(err, n, text, "backend name too long");
    if (strcmp(buf, "*") != 0) strcpy(r.backend, buf);

    char * save = nullptr;
    char * kind = strtok_r(c1 + 1, ",", &save);
    if (!kind) return fail(err, n, text, "no call kind (use * for any)");
    if (strcmp(kind, "*") != 0) {
        r.kind = delay_kind_of(kind);
        if (r.kind < 0) {
            return fail(err, n, text, "unknown call kind (graph_compute, cpy_tensor_async, set_tensor_async, get_tensor_async, "
                                      "set_tensor_2d_async, get_tensor_2d_async, event_record, event_wait, synchronize, comm_allreduce or *)");
        }
    }
    for (char * kv = strtok_r(nullptr, ",", &save); kv; kv = strtok_r(nullptr, ",", &save)) {
        char * eq = strchr(kv, '=');
        if (!eq || eq == kv || !eq[1]) return fail(err, n, text, "keys are KEY=VALUE (graph, split, op, tensor, src, queue, nth, seed)");
        *eq = '\0';
        const char * v = eq + 1;
        if (strcmp(kv, "graph") == 0) {
            if (!parse_range(v, &r.graph_lo, &r.graph_hi)) return fail(err, n, text, "graph= takes N or A-B (A <= B)");
        } else if (strcmp(kv, "split") == 0) {
            if (!parse_range(v, &r.split_lo, &r.split_hi)) return fail(err, n, text, "split= takes N or A-B (A <= B)");
        } else if (strcmp(kv, "nth") == 0) {
            if (!parse_range(v, &r.nth_lo, &r.nth_hi)) return fail(err, n, text, "nth= takes N or A-B (A <= B)");
        } else if (strcmp(kv, "op") == 0) {
            if (strlen(v) >= sizeof(r.op)) return fail(err, n, text, "op name too long");
            for (const char * p = v; *p; p++) {
                if (!isalnum((unsigned char) *p) && *p != '_') return fail(err, n, text, "op= takes a ggml op name such as ADD or MUL_MAT");
                r.op[p - v] = (char) toupper((unsigned char) *p);
            }
            r.op[strlen(v)] = '\0';
        } else if (strcmp(kv, "tensor") == 0) {
            if (strlen(v) >= sizeof(r.tensor)) return fail(err, n, text, "tensor glob too long");
            strcpy(r.tensor, v);
        } else if (strcmp(kv, "src") == 0 || strcmp(kv, "queue") == 0) {
            char * to = kv[0] == 's' ? r.src : r.queue;
            if (strlen(v) >= sizeof(r.src)) return fail(err, n, text, "backend name too long");
            strcpy(to, v);
        } else if (strcmp(kv, "seed") == 0) {
            char * end;
            if (!isdigit((unsigned char) *v)) return fail(err, n, text, "seed= takes a non-negative integer");
            r.seed = strtoull(v, &end, 10);
            if (*end) return fail(err, n, text, "seed= takes a non-negative integer");
        } else {
            return fail(err, n, text, "unknown key (graph, split, op, tensor, src, queue, nth, seed)");
        }
    }
    if (r.op[0] && r.kind != K_GRAPH_COMPUTE) return fail(err, n, text, "op= applies to graph_compute only");
    if (r.src[0] && r.kind != K_CPY_TENSOR_ASYNC) return fail(err, n, text, "src= applies to cpy_tensor_async only");
    return true;
}

uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

bool in_range(int64_t v, int64_t lo, int64_t hi) { return lo == DELAY_ANY || (v >= lo && v <= hi); }

uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

}  // namespace

int delay_kind_of(const char * name) {
    for (const KindName & k : KINDS) {
        if (strcmp(k.name, name) == 0) return k.kind;
    }
    return -1;
}

bool delay_parse(const char * text, char * err, size_t err_len) {
    g_delay_n_rules = 0;
    char buf[MAX_DELAY_RULES * sizeof(DelayRule::text)];
    if (strlen(text) >= sizeof(buf)) {
        snprintf(err, err_len, "bad delay rules: more than %zu characters", sizeof(buf) - 1);
        return false;
    }
    strcpy(buf, text);
    int n = 0;
    char * save = nullptr;
    for (char * rule = strtok_r(buf, ";", &save); rule; rule = strtok_r(nullptr, ";", &save)) {
        while (isspace((unsigned char) *rule)) rule++;
        for (char * e = rule + strlen(rule); e > rule && isspace((unsigned char) e[-1]);) *--e = '\0';
        if (!*rule) continue;
        if (n == MAX_DELAY_RULES) {
            snprintf(err, err_len, "bad delay rules: at most %d rules", MAX_DELAY_RULES);
            return false;
        }
        if (!parse_rule(rule, g_delay_rules[n], err, err_len)) return false;
        n++;
    }
    if (n == 0) {
        snprintf(err, err_len, "bad delay rules: '%s' holds no rule", text);
        return false;
    }
    g_delay_n_rules = n;
    return true;
}

namespace {
bool prefix_of(const char * prefix, const char * name) {
    return !prefix[0] || (name && strncmp(name, prefix, strlen(prefix)) == 0);
}
}  // namespace

bool delay_rule_names(const DelayRule & r, const char * name) { return prefix_of(r.backend, name); }

bool delay_rule_may_act_on(const DelayRule & r, const char * name) {
    if (r.queue[0]) return prefix_of(r.queue, name);
    if (prefix_of(r.backend, name)) return true;
    bool copies = r.kind < 0 || r.kind == K_CPY_TENSOR_ASYNC;
    return copies && prefix_of(r.src, name);  // a peer copy runs on its source's queue (any source without src=)
}

void delay_rule_queue_words(const DelayRule & r, char * out, size_t n) {
    bool copies = r.kind < 0 || r.kind == K_CPY_TENSOR_ASYNC;
    if (r.queue[0]) {
        snprintf(out, n, "acts on %s's queue alone", r.queue);
    } else if (r.src[0]) {
        snprintf(out, n, "acts on %s's queue (a copy from an asynchronous backend runs on its source's queue; "
                         "from any other, on the destination's)", r.src);
    } else if (copies && r.backend[0]) {
        snprintf(out, n, "acts on %s's queue, but a copy into %s from another asynchronous backend runs on the source's "
                         "queue: there it stalls the source (the copy's writer), not %s (queue=%s: %s's queue alone)",
                 r.backend, r.backend, r.backend, r.backend, r.backend);
    } else if (copies) {
        snprintf(out, n, "acts on each operation's own queue; a copy between two asynchronous backends runs on "
                         "the source's");
    } else {
        snprintf(out, n, "acts on %s's queue", r.backend[0] ? r.backend : "each backend");
    }
}

int delay_match(const DelayQuery & q, DelayHit * hits, int max_hits) {
    int found = 0;
    for (int i = 0; i < g_delay_n_rules && found < max_hits; i++) {
        DelayRule & r = g_delay_rules[i];
        // cheapest tests first; the tensor glob walks names, so it goes last
        if (r.kind >= 0 && r.kind != q.kind) continue;
        if (!in_range(q.graph == NONE32 ? -2 : (int64_t) q.graph, r.graph_lo, r.graph_hi)) continue;
        if (!in_range(q.split, r.split_lo, r.split_hi)) continue;
        if (!delay_rule_names(r, q.backend_name)) continue;
        if (r.src[0] && !prefix_of(r.src, q.source_name)) continue;
        if (r.queue[0] && !prefix_of(r.queue, q.queue_name ? q.queue_name : q.backend_name)) continue;
        if (r.op[0] && (r.op_id < 0 || (q.op_first != r.op_id && q.op_last != r.op_id))) continue;
        if (r.tensor[0] && (!q.has_tensor || !q.has_tensor(q.ctx, r.tensor))) continue;
        uint64_t n = r.matched.fetch_add(1, std::memory_order_relaxed);
        if (!in_range((int64_t) n, r.nth_lo, r.nth_hi)) continue;
        double us = r.us;
        if (r.random) {  // a draw that depends on (seed, match number) only: reproducible
            uint64_t x = splitmix64(r.seed * 0x100000001B3ull ^ splitmix64(n));
            us = r.us * (double) (x >> 11) / (double) (1ull << 53);
        }
        hits[found++] = DelayHit{i, (uint64_t) (us * 1e3 + 0.5), n};
    }
    return found;
}

void delay_sleep_ns(uint64_t ns) {
    const uint64_t SPIN_NS = 100000;  // a sleep can overshoot by tens of microseconds
    uint64_t until = now_ns() + ns;
    if (ns > SPIN_NS) {
        uint64_t s = ns - SPIN_NS;
        timespec ts{(time_t) (s / 1000000000ull), (long) (s % 1000000000ull)};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    while (now_ns() < until) {
    }
}

}  // namespace ggml_trace
