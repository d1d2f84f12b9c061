// Registry patching and the communicator table for a backend's own allreduce (comm.h); on the
// way, what each registry says of itself.
#include "comm.h"

#include <stdio.h>
#include <string.h>

#include <atomic>
#include <mutex>

#include "capture.h"
#include "cupti_mode.h"
#include "delay.h"
#include "device_timing.h"
#include "ggml_api.h"
#include "registry.h"
#include "trace_writer.h"

namespace ggml_trace {

namespace {

using GetProc = void * (*)(ggml_backend_reg_t, const char *);
using CommInit = void * (*)(ggml_backend_t *, size_t);
using CommFree = void (*)(void *);
using CommAllreduce = bool (*)(void *, ggml_tensor **);

const int MAX_REGS = 16;
const int MAX_GROUPS = 16;

struct RegEntry {  // a registry whose get_proc_address we replaced
    ggml_backend_reg_t reg = nullptr;
    GetProc get_proc = nullptr;
    CommInit init = nullptr;
    CommFree free = nullptr;
    CommAllreduce allreduce = nullptr;
};
RegEntry g_regs[MAX_REGS];
std::atomic<int> g_n_regs{0};  // entries are only appended, filled before the count grows

CommGroup g_groups[MAX_GROUPS];
int g_n_inits = 0;
std::mutex g_comm_mutex;  // rare paths only: patching, init, free

struct RegApi {
    size_t (*count)() = nullptr;
    ggml_backend_reg_t (*get)(size_t) = nullptr;
    const char * (*name)(ggml_backend_reg_t) = nullptr;
};
RegApi g_reg_api;

RegEntry * entry_of_reg(ggml_backend_reg_t reg) {
    for (int i = 0; i < g_n_regs; i++) {
        if (g_regs[i].reg == reg) return &g_regs[i];
    }
    return nullptr;
}

RegEntry * entry_of_backends(ggml_backend_t * backends, size_t n) {
    if (n == 0 || !backends[0]) return nullptr;
    ggml_backend_dev_t dev = g_api.backend_get_device(backends[0]);
    return dev ? entry_of_reg(g_api.dev_backend_reg(dev)) : nullptr;
}

CommGroup * group_of(void * ctx) {
    for (CommGroup & g : g_groups) {
        if (ctx && g.ctx == ctx) return &g;
    }
    return nullptr;
}

bool process_has_nccl() { return ggml_symbol("ncclCommInitAll") != nullptr; }

void * comm_init_hook(ggml_backend_t * backends, size_t n) {
    std::lock_guard<std::mutex> lock(g_comm_mutex);
    RegEntry * e = entry_of_backends(backends, n);
    if (!e || !e->init) {
        return nullptr;  // not ours to answer: the meta backend falls back to its butterfly
    }
    void * ctx = e->init(backends, n);
    if (ctx && process_has_nccl()) {
        cupti_need_driver_api();  // NCCL launches through the driver API
    }
    if (ctx && n <= (size_t) COMM_MAX_DEVICES) {
        for (CommGroup & g : g_groups) {
            if (g.ctx) continue;
            g.ctx = ctx;
            g.reg = e->reg;
            g.allreduce = e->allreduce;
            g.n = (int) n;
            for (size_t i = 0; i < n; i++) g.backends[i] = backends[i];
            break;
        }
    }
    if (writer_is_open()) {
        // what the registry answered; which of its paths ran is read from the calls (docs/tensor-parallel.md)
        char key[32], value[512];
        snprintf(key, sizeof(key), "comm.init.%d", g_n_inits++);
        int len = snprintf(value, sizeof(value), "registry=%s;context=%d;nccl_loaded=%d;ctx=%p;devices=",
                           g_reg_api.name(e->reg), ctx != nullptr, process_has_nccl(), ctx);
        for (size_t i = 0; i < n && len > 0 && len < (int) sizeof(value); i++) {
            len += snprintf(value + len, sizeof(value) - len, "%s%s", i ? "," : "", g_api.backend_name(backends[i]));
        }
        write_meta(key, value, strnlen(value, sizeof(value)));
    }
    return ctx;
}

void comm_free_hook(void * ctx) {
    CommFree orig = nullptr;
    {
        std::lock_guard<std::mutex> lock(g_comm_mutex);
        if (CommGroup * g = group_of(ctx)) {
            if (RegEntry * e = entry_of_reg(g->reg)) orig = e->free;
            *g = CommGroup();
        }
        // a communicator the table did not hold: the registry that offers a free
        for (int i = 0; i < g_n_regs && !orig; i++) orig = g_regs[i].free;
    }
    if (orig) orig(ctx);
}

// One call of a backend's own allreduce (comm.h): a record per device, each delayed and timed on
// that device's queue. The kernels CUPTI sees during the call correlate to the first device's record.
bool traced_comm_allreduce(const CommGroup & g, ggml_tensor ** tensors) {
    if (!capturing()) {
        return g.allreduce(g.ctx, tensors);
    }
    static std::atomic<uint64_t> next_seq{0};
    uint64_t seq = next_seq.fetch_add(1);
    Call c(K_COMM_ALLREDUCE);
    CallRec r[COMM_MAX_DEVICES];
    BackendEntry * e[COMM_MAX_DEVICES];
    TimedOp timed[COMM_MAX_DEVICES];
    for (int i = 0; i < g.n; i++) {
        r[i] = c.r;
        r[i].call_id = i == 0 ? c.id() : next_call_id();
        e[i] = find_backend(g.backends[i]);
        r[i].backend = e[i] ? e[i]->index : NONE32;
        r[i].obj = (uint64_t) (uintptr_t) g.ctx;
        r[i].arg = seq;
        if (!e[i]) continue;
        if (delay_on()) delay_before(r[i], g.backends[i], e[i]->index, e[i]->orig, nullptr, tensors[i], nullptr);
        timed[i] = device_timing_begin(g.backends[i], e[i]->index, e[i]->orig);
    }
    uint64_t t_begin = now_ticks();
    bool ok = g.allreduce(g.ctx, tensors);
    uint64_t t_end = now_ticks();
    for (int i = 0; i < g.n; i++) {
        if (ok && e[i]) {
            device_timing_end(timed[i], g.backends[i], r[i]);
        } else {
            device_timing_cancel(timed[i]);
        }
        r[i].t_begin = t_begin;
        r[i].t_end = t_end;
        r[i].flags = ok ? 0 : CALL_DECLINED;  // the meta backend's butterfly follows
        if (ok && tensors[i]) {
            emit_tensor(REC_ACCESS, ACC_READ, r[i].call_id, tensors[i], 0, NONE32);
            emit_tensor(REC_ACCESS, ACC_WRITE, r[i].call_id, tensors[i], 0, NONE32);
        }
        commit_call(r[i]);
    }
    return ok;
}

bool comm_allreduce_hook(void * ctx, ggml_tensor ** tensors) {
    const CommGroup * g = group_of(ctx);
    if (!g || !g->allreduce) {
        // a communicator made before we patched, or one the table had no room for
        for (int i = 0; i < g_n_regs; i++) {
            if (g_regs[i].allreduce) return g_regs[i].allreduce(ctx, tensors);
        }
        return false;
    }
    return traced_comm_allreduce(*g, tensors);
}

void * get_proc_hook(ggml_backend_reg_t reg, const char * name) {
    RegEntry * e = entry_of_reg(reg);
    void * p = e && e->get_proc ? e->get_proc(reg, name) : nullptr;
    if (!p || !e) return p;
    std::lock_guard<std::mutex> lock(g_comm_mutex);
    if (strcmp(name, "ggml_backend_comm_init") == 0) {
        e->init = (CommInit) p;
        return (void *) comm_init_hook;
    }
    if (strcmp(name, "ggml_backend_comm_allreduce_tensor") == 0) {
        e->allreduce = (CommAllreduce) p;
        for (CommGroup & g : g_groups) {  // the meta backend asks for it after comm_init
            if (g.ctx && g.reg == reg) g.allreduce = e->allreduce;
        }
        return (void *) comm_allreduce_hook;
    }
    if (strcmp(name, "ggml_backend_comm_free") == 0) {
        e->free = (CommFree) p;
        return (void *) comm_free_hook;
    }
    return p;
}

bool resolve_reg_api() {
    static std::once_flag once;
    std::call_once(once, [] {
        RegApi a;
        // ggml's own (the hooks interpose these two, which would abort where the program has no
        // libggml, only libggml-base: then there is no registry to patch)
        a.count = (size_t (*)()) ggml_symbol("ggml_backend_reg_count", true);
        a.get = (ggml_backend_reg_t (*)(size_t)) ggml_symbol("ggml_backend_reg_get", true);
        a.name = (const char * (*)(ggml_backend_reg_t)) ggml_symbol("ggml_backend_reg_name");
        if (a.count && a.get && a.name) g_reg_api = a;
    });
    return g_reg_api.count != nullptr;
}

// What a registry says of itself (ggml_backend_get_features: CUDA's ARCHS, USE_GRAPHS, ...), as
// META backend.features.NAME = "K=V;K=V", once per registry.
void write_features(ggml_backend_reg_t reg) {
    struct Feature {
        const char * name;
        const char * value;
    };
    auto get = (const Feature * (*)(ggml_backend_reg_t)) (reg->iface.get_proc_address
                                                               ? reg->iface.get_proc_address(reg, "ggml_backend_get_features")
                                                               : nullptr);
    const Feature * f = get ? get(reg) : nullptr;
    if (!f || !writer_is_open()) return;
    char key[64], value[1024];
    snprintf(key, sizeof(key), "backend.features.%s", g_reg_api.name(reg));
    int len = 0;
    for (int i = 0; f[i].name && len < (int) sizeof(value); i++) {
        len += snprintf(value + len, sizeof(value) - len, "%s%s=%s", i ? ";" : "", f[i].name,
                        f[i].value ? f[i].value : "");
    }
    write_meta(key, value, strnlen(value, sizeof(value)));
}

}  // namespace

void comm_patch_registries() {
    if (!resolve_reg_api()) return;
    size_t n = g_reg_api.count();
    bool patched = false;
    std::lock_guard<std::mutex> lock(g_comm_mutex);
    for (size_t i = 0; i < n && g_n_regs.load() < MAX_REGS; i++) {
        ggml_backend_reg_t reg = g_reg_api.get(i);
        if (!reg || entry_of_reg(reg) || reg->api_version != GGML_BACKEND_API_VERSION) continue;
        // layout check: the name read through our struct must be the one ggml returns
        if (!reg->iface.get_proc_address || !reg->iface.get_name ||
            strcmp(reg->iface.get_name(reg), g_reg_api.name(reg)) != 0) continue;
        write_features(reg);
        RegEntry & e = g_regs[g_n_regs.load()];
        e.reg = reg;
        e.get_proc = reg->iface.get_proc_address;
        g_n_regs.fetch_add(1);  // published before the patch: the hook finds its entry at once
        reg->iface.get_proc_address = get_proc_hook;
        patched = true;
    }
    if (patched && writer_is_open()) {  // which registries could offer an allreduce we would see
        char value[256];
        int len = 0;
        for (int i = 0; i < g_n_regs.load() && len < (int) sizeof(value); i++) {
            len += snprintf(value + len, sizeof(value) - len, "%s%s", i ? "," : "", g_reg_api.name(g_regs[i].reg));
        }
        write_meta("comm.registries", value, strnlen(value, sizeof(value)));
    }
}

}  // namespace ggml_trace
