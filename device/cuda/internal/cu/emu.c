//go:build cudaemu

// The CUDA emulator's runtime: device memory, kernel launches and GEMMs on
// the CPU. See doc.go and emu/api.h.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include "emu.h"
#include "emu/api.h"

// ---------------------------------------------------------------- errors

static pthread_mutex_t emu_mu = PTHREAD_MUTEX_INITIALIZER;
static char emu_msg[1024];  // why the last failing call failed

const char* memfit_emu_message(void) { return emu_msg; }

// ---------------------------------------------------------------- memory
//
// A segment is what cuMemAlloc returned: host pages with a PROT_NONE page
// on each side, so that a raw access that escapes every allocation faults.
// A block is a tracked extent inside a segment (an allocation of memfit's
// caching allocator, with its requested size): kernels' GMEM accesses and
// GEMM operands must fall inside a live block.

typedef struct {
    uintptr_t p;
    size_t n;
    // A segment's sectors read and written by the launch being counted
    // (one bit per 32 bytes; made at the first counted access).
    uint64_t *rbits, *wbits;
} extent;

typedef struct {
    extent* v;
    int len, cap;
} extents;

static extents segments, blocks;
static size_t used_bytes;

// find returns the index of the extent containing [p, p+n), or -1; *below
// is the index of the last extent starting at or below p (-1 if none).
static int find(const extents* s, uintptr_t p, size_t n, int* below) {
    int lo = 0, hi = s->len;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->v[mid].p <= p) lo = mid + 1;
        else hi = mid;
    }
    int i = lo - 1;
    if (below) *below = i;
    if (i >= 0 && p + n <= s->v[i].p + s->v[i].n && p + n >= p) return i;
    return -1;
}

static int insert(extents* s, uintptr_t p, size_t n) {
    if (s->len == s->cap) {
        int c = s->cap ? 2 * s->cap : 64;
        extent* v = realloc(s->v, (size_t)c * sizeof(extent));
        if (!v) return -1;
        s->v = v;
        s->cap = c;
    }
    int below;
    find(s, p, 0, &below);
    int at = below + 1;
    memmove(&s->v[at + 1], &s->v[at], (size_t)(s->len - at) * sizeof(extent));
    s->v[at].p = p;
    s->v[at].n = n;
    s->v[at].rbits = s->v[at].wbits = NULL;
    s->len++;
    return 0;
}

// last_block is the block the previous bounds check found: the next access
// is most often in it. Emptied whenever an extent goes.
static extent last_block;

static void forget_segment(void);

static int remove_at(extents* s, uintptr_t p) {
    last_block.n = 0;
    forget_segment();
    int below;
    find(s, p, 0, &below);
    if (below < 0 || s->v[below].p != p) return -1;
    memmove(&s->v[below], &s->v[below + 1], (size_t)(s->len - below - 1) * sizeof(extent));
    s->len--;
    return 0;
}

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

uint64_t memfit_emu_total = 4ull << 30;

int memfit_emu_mem_alloc(uint64_t* out, uint64_t n) {
    pthread_mutex_lock(&emu_mu);
    int r = CUDA_ERROR_OUT_OF_MEMORY;
    if (n == 0) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (used_bytes + n > memfit_emu_total) goto out;
    size_t pg = page_size(), body = (n + pg - 1) / pg * pg;
    char* m = mmap(NULL, body + 2 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) goto out;
    if (mprotect(m + pg, body, PROT_READ | PROT_WRITE) != 0) {
        munmap(m, body + 2 * pg);
        goto out;
    }
    uintptr_t p = (uintptr_t)(m + pg);
    if (insert(&segments, p, n) != 0) {
        munmap(m, body + 2 * pg);
        goto out;
    }
    used_bytes += n;
    *out = p;
    r = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&emu_mu);
    return r;
}

int memfit_emu_mem_free(uint64_t p) {
    pthread_mutex_lock(&emu_mu);
    int r = CUDA_ERROR_INVALID_VALUE;
    int below;
    find(&segments, (uintptr_t)p, 0, &below);
    if (below >= 0 && segments.v[below].p == (uintptr_t)p) {
        size_t pg = page_size(), n = segments.v[below].n, body = (n + pg - 1) / pg * pg;
        // Blocks left inside are gone with the segment.
        for (int i = blocks.len - 1; i >= 0; i--) {
            if (blocks.v[i].p >= (uintptr_t)p && blocks.v[i].p < (uintptr_t)p + n) remove_at(&blocks, blocks.v[i].p);
        }
        free(segments.v[below].rbits);
        free(segments.v[below].wbits);
        remove_at(&segments, (uintptr_t)p);
        munmap((char*)(uintptr_t)p - pg, body + 2 * pg);
        used_bytes -= n;
        r = CUDA_SUCCESS;
    } else {
        snprintf(emu_msg, sizeof emu_msg, "cuMemFree of %#llx, which cuMemAlloc did not return", (unsigned long long)p);
    }
    pthread_mutex_unlock(&emu_mu);
    return r;
}

void memfit_emu_mem_info(uint64_t* free_bytes, uint64_t* total) {
    pthread_mutex_lock(&emu_mu);
    *total = memfit_emu_total;
    *free_bytes = memfit_emu_total - used_bytes;
    pthread_mutex_unlock(&emu_mu);
}

int memfit_emu_track(uint64_t p, uint64_t n) {
    pthread_mutex_lock(&emu_mu);
    int r = CUDA_ERROR_INVALID_VALUE;
    if (find(&segments, (uintptr_t)p, n, NULL) < 0) {
        snprintf(emu_msg, sizeof emu_msg, "allocation of %llu bytes at %#llx is not inside device memory",
                 (unsigned long long)n, (unsigned long long)p);
    } else if (insert(&blocks, (uintptr_t)p, n) == 0) {
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&emu_mu);
    return r;
}

void memfit_emu_untrack(uint64_t p) {
    pthread_mutex_lock(&emu_mu);
    remove_at(&blocks, (uintptr_t)p);
    pthread_mutex_unlock(&emu_mu);
}

// describe writes where [p, p+n) is relative to the live blocks.
static void describe(char* out, size_t size, uintptr_t p, size_t n) {
    int below;
    find(&blocks, p, 0, &below);
    if (below >= 0 && p < blocks.v[below].p + blocks.v[below].n) {
        extent b = blocks.v[below];
        snprintf(out, size, "bytes [%llu, %llu) of a %llu-byte allocation (element %llu of %llu)",
                 (unsigned long long)(p - b.p), (unsigned long long)(p - b.p + n), (unsigned long long)b.n,
                 (unsigned long long)((p - b.p) / n), (unsigned long long)(b.n / n));
        return;
    }
    if (below >= 0) {
        extent b = blocks.v[below];
        snprintf(out, size, "byte %llu past the end of a %llu-byte allocation (element %llu of %llu)",
                 (unsigned long long)(p - (b.p + b.n)), (unsigned long long)b.n, (unsigned long long)((p - b.p) / n),
                 (unsigned long long)(b.n / n));
        return;
    }
    snprintf(out, size, "%#llx, below every live allocation", (unsigned long long)p);
}

// check_range is the bounds check of driver calls and GEMM operands: the
// whole range within one live block (blocks == 0: within one segment).
static int check_range(const char* what, uintptr_t p, size_t n, int need_block) {
    if (n == 0) return 1;
    if (find(need_block ? &blocks : &segments, p, n, NULL) >= 0) return 1;
    char where[256];
    describe(where, sizeof where, p, n);
    snprintf(emu_msg, sizeof emu_msg, "%s: %llu bytes at %#llx outside every live allocation: %s", what,
             (unsigned long long)n, (unsigned long long)p, where);
    return 0;
}

// ---------------------------------------------------------------- counting
//
// With counting on (memfit_emu_count), every launch records the distinct
// 32-byte sectors of device memory its threads read and write (a GPU
// moves global memory in such sectors), every GEMM the sectors of its
// operands, and every copy its bytes. Distinct per launch: what a kernel
// reads twice counts once, as if every cache held it, so the figures are
// the traffic a launch cannot avoid, the lower bound of its DRAM traffic.

#define SECTOR 32

static int counting;
static uint64_t cnt_read, cnt_written, cnt_accesses;  // of the launch or GEMM being counted

// dirty lists the bitmap words set since the last flush, to clear them.
static uint64_t** dirty;
static size_t ndirty, capdirty;

// seg is the segment of the last counted access.
static struct {
    uintptr_t p;
    size_t n;
    uint64_t *r, *w;
} seg;

static void forget_segment(void) { seg.n = 0; }

static void mark(uint64_t* bits, size_t sector, uint64_t* count) {
    uint64_t* w = &bits[sector / 64];
    uint64_t m = 1ull << (sector % 64);
    if (*w & m) return;
    if (*w == 0) {
        if (ndirty == capdirty) {
            size_t c = capdirty ? 2 * capdirty : 1024;
            uint64_t** d = realloc(dirty, c * sizeof *d);
            if (!d) return;
            dirty = d;
            capdirty = c;
        }
        dirty[ndirty++] = w;
    }
    *w |= m;
    (*count)++;
}

// count_range records an access to [a, a+n) of device memory.
static void count_range(uintptr_t a, size_t n, int rw) {
    if (n == 0) return;
    if (!(a >= seg.p && a + n <= seg.p + seg.n)) {
        int i = find(&segments, a, n, NULL);
        if (i < 0) return;
        extent* e = &segments.v[i];
        if (!e->rbits) {
            size_t words = (e->n + SECTOR * 64 - 1) / (SECTOR * 64);
            e->rbits = calloc(words, sizeof(uint64_t));
            e->wbits = calloc(words, sizeof(uint64_t));
            if (!e->rbits || !e->wbits) {
                free(e->rbits);
                free(e->wbits);
                e->rbits = e->wbits = NULL;
                return;
            }
        }
        seg.p = e->p;
        seg.n = e->n;
        seg.r = e->rbits;
        seg.w = e->wbits;
    }
    size_t first = (a - seg.p) / SECTOR, last = (a + n - 1 - seg.p) / SECTOR;
    for (size_t s = first; s <= last; s++) {
        if (rw & MEMFIT_READ) mark(seg.r, s, &cnt_read);
        if (rw & MEMFIT_WRITE) mark(seg.w, s, &cnt_written);
    }
}

// flush ends a counted launch or GEMM: the sectors it touched become
// untouched for the next.
static void flush(uint64_t* read, uint64_t* written, uint64_t* accesses) {
    for (size_t i = 0; i < ndirty; i++) *dirty[i] = 0;
    ndirty = 0;
    *read += cnt_read * SECTOR;
    *written += cnt_written * SECTOR;
    *accesses += cnt_accesses;
    cnt_read = cnt_written = cnt_accesses = 0;
}

// copies: host to device, device to host, device to device, memset.
static uint64_t copy_calls[4], copy_bytes[4];

static void count_copy(int kind, uint64_t n) {
    if (!counting) return;
    copy_calls[kind]++;
    copy_bytes[kind] += n;
}

int memfit_emu_memcpy(uint64_t dst, uint64_t src, uint64_t n, int dst_dev, int src_dev) {
    pthread_mutex_lock(&emu_mu);
    int ok = (!dst_dev || check_range("cuMemcpy destination", (uintptr_t)dst, n, 0)) &&
             (!src_dev || check_range("cuMemcpy source", (uintptr_t)src, n, 0));
    if (ok) {
        memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n);
        count_copy(dst_dev && src_dev ? 2 : dst_dev ? 0 : src_dev ? 1 : 2, n);
    }
    pthread_mutex_unlock(&emu_mu);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

int memfit_emu_memset32(uint64_t dst, uint32_t v, uint64_t count) {
    pthread_mutex_lock(&emu_mu);
    int ok = check_range("cuMemsetD32", (uintptr_t)dst, count * 4, 0);
    if (ok) {
        uint32_t* p = (uint32_t*)(uintptr_t)dst;
        for (uint64_t i = 0; i < count; i++) p[i] = v;
        count_copy(3, 4 * count);
    }
    pthread_mutex_unlock(&emu_mu);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---------------------------------------------------------------- fibers
//
// Each CUDA thread of a block is a fiber with its own stack; the scheduler
// resumes them in turn, and a fiber gives the CPU back only at a barrier,
// a warp shuffle, vote or matrix product, or its end. So the threads of a block really
// interleave at barriers, and shared memory written by one thread is seen
// by another only if a barrier orders them, as on a GPU.

#define MAX_THREADS 1024
#define STACK_BYTES (256 << 10)

typedef struct fiber fiber;
struct fiber {
    void* sp;  // saved stack pointer (x86-64) while switched out
#if !defined(__x86_64__)
    ucontext_t uc;
#endif
    char* stack;
    memfit_thread t;
    int done, waiting;
    unsigned long long wait_gen;
    int wait_warp;  // the warp's generation is waited on, not the block's
};

#if defined(__x86_64__)
// memfit_emu_switch saves the callee-saved registers and stack pointer in
// *from and resumes the context whose stack pointer is to. The floating-
// point control state is shared: no kernel changes it.
void memfit_emu_switch(void** from, void* to);
__asm__(
    ".text\n"
    ".globl memfit_emu_switch\n"
    ".type memfit_emu_switch,@function\n"
    "memfit_emu_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size memfit_emu_switch, .-memfit_emu_switch\n");
#endif

typedef struct {
    fiber f[MAX_THREADS];
    int n, live;
    void* sched_sp;
#if !defined(__x86_64__)
    ucontext_t sched_uc;
#endif
    fiber* cur;
    memfit_thread* cur_thread;
    // block barrier
    int arrived;
    unsigned long long gen;
    // warps
    struct {
        int arrived, live;
        unsigned long long gen;
        unsigned long long slot[32];
        // mma: each lane's fragments and the warp generation at which it
        // arrived (tag), the generation whose product is done, the types.
        unsigned a[32][4], b[32][2];
        float c[32][4], d[32][4];
        unsigned long long tag[32], done;
        int type[32];
    } warp[MAX_THREADS / 32];
    void (*entry)(void**);
    void** params;
    const char* kernel;
    int failed;
    int pos, dir;  // the last thread resumed, and the direction of the pass
} block_state;

static block_state B;

static void switch_to(fiber* from, fiber* to) {
    B.cur = to;
    B.cur_thread = &to->t;
#if defined(__x86_64__)
    memfit_emu_switch(&from->sp, to->sp);
#else
    swapcontext(&from->uc, &to->uc);
#endif
}

static void to_scheduler(fiber* from) {
#if defined(__x86_64__)
    memfit_emu_switch(&from->sp, B.sched_sp);
#else
    swapcontext(&from->uc, &B.sched_uc);
#endif
}

// runnable reports whether thread i can run: not finished, and past the
// barrier it waits at.
static int runnable(int i) {
    fiber* f = &B.f[i];
    if (f->done) return 0;
    if (f->waiting) {
        unsigned long long g = f->wait_warp ? B.warp[i / 32].gen : B.gen;
        if (g == f->wait_gen) return 0;
        f->waiting = 0;
    }
    return 1;
}

// next_thread picks the thread to run after the current one: the next
// runnable one in the pass's direction. Passes alternate direction, so that
// a missing barrier shows whichever way the threads happen to be ordered.
// -1: none can run.
static int next_thread(void) {
    int n = B.n, i = B.pos;
    for (int step = 0; step < 2 * n + 2; step++) {
        i += B.dir;
        if (i >= n) {
            B.dir = -1;
            i = n;
            continue;
        }
        if (i < 0) {
            B.dir = 1;
            i = -1;
            continue;
        }
        if (runnable(i)) {
            B.pos = i;
            return i;
        }
    }
    return -1;
}

// yield_to_scheduler hands the CPU from the running thread to the next
// runnable one, directly, or to the scheduler when none can run.
static void yield_to_scheduler(void) {
    fiber* f = B.cur;
    int next = B.failed ? -1 : next_thread();
    if (next < 0) {
        to_scheduler(f);
        return;
    }
    if (&B.f[next] != f) switch_to(f, &B.f[next]);
    B.cur = f;
    B.cur_thread = &f->t;
}

// fail ends the launch with code, saying which thread failed where.
static void fail(int code, const char* detail, int line) {
    fiber* f = B.cur;
    if (!B.failed) {
        char at[32] = "";
        if (line > 0) snprintf(at, sizeof at, ", kernels.cu:%d", line);
        snprintf(emu_msg, sizeof emu_msg, "%s: block (%u,%u,%u) thread (%u,%u,%u)%s: %s", B.kernel, f->t.block.x,
                 f->t.block.y, f->t.block.z, f->t.thread.x, f->t.thread.y, f->t.thread.z, at, detail);
        B.failed = code;
    }
    // Abandon the thread: its stack is the emulator's, nothing to unwind.
    f->done = 1;
    B.live--;
    yield_to_scheduler();
}

static void thread_exit(void) {
    fiber* f = B.cur;
    f->done = 1;
    B.live--;
    int w = (int)(f - B.f) / 32;
    B.warp[w].live--;
    // A thread that ends counts as arrived at the barriers others wait at.
    if (B.arrived > 0 && B.arrived >= B.live) {
        B.arrived = 0;
        B.gen++;
    }
    if (B.warp[w].arrived > 0 && B.warp[w].arrived >= B.warp[w].live) {
        B.warp[w].arrived = 0;
        B.warp[w].gen++;
    }
}

static void fiber_main(void) {
    B.entry(B.params);
    thread_exit();
    yield_to_scheduler();
    abort();  // never resumed
}

static void emu_syncthreads(void) {
    fiber* f = B.cur;
    unsigned long long g = B.gen;
    if (++B.arrived >= B.live) {
        B.arrived = 0;
        B.gen++;
        // The last to arrive goes on only after the others had their turn:
        // yielding keeps the order in which threads pass a barrier varied.
    }
    f->waiting = 1;
    f->wait_warp = 0;
    f->wait_gen = g;
    yield_to_scheduler();
}

// warp_barrier waits until every live thread of the calling thread's warp
// has arrived.
static void warp_barrier(void) {
    fiber* f = B.cur;
    int w = (int)(f - B.f) / 32;
    unsigned long long g = B.warp[w].gen;
    if (++B.warp[w].arrived >= B.warp[w].live) {
        B.warp[w].arrived = 0;
        B.warp[w].gen++;
    }
    f->waiting = 1;
    f->wait_warp = 1;
    f->wait_gen = g;
    yield_to_scheduler();
}

static void check_mask(unsigned mask) {
    int lane = (int)(B.cur - B.f) % 32;
    if (!(mask >> lane & 1u)) fail(CUDA_ERROR_LAUNCH_FAILED, "a warp primitive called by a lane outside its mask", 0);
}

static void emu_syncwarp(unsigned mask) {
    check_mask(mask);
    warp_barrier();
}

static unsigned long long emu_shfl(int kind, unsigned mask, unsigned long long bits, int arg, int width) {
    check_mask(mask);
    fiber* f = B.cur;
    int idx = (int)(f - B.f), w = idx / 32, lane = idx % 32;
    if (width <= 0 || width > 32 || (width & (width - 1))) fail(CUDA_ERROR_LAUNCH_FAILED, "shuffle width not a power of two up to 32", 0);
    B.warp[w].slot[lane] = bits;
    warp_barrier();
    int base = lane & ~(width - 1), src = lane;
    switch (kind) {
    case MEMFIT_SHFL_IDX: src = base + (arg & (width - 1)); break;
    case MEMFIT_SHFL_UP: src = lane - arg >= base ? lane - arg : lane; break;
    case MEMFIT_SHFL_DOWN: src = lane + arg < base + width ? lane + arg : lane; break;
    case MEMFIT_SHFL_XOR: src = (lane ^ arg) < base + width ? lane ^ arg : lane; break;
    }
    unsigned long long r = bits;
    if (w * 32 + src < B.n && !(B.f[w * 32 + src].done && src != lane)) r = B.warp[w].slot[src];
    if (!(mask >> src & 1u)) fail(CUDA_ERROR_LAUNCH_FAILED, "a shuffle reads a lane outside its mask", 0);
    warp_barrier();  // nobody overwrites a slot before every lane has read
    return r;
}

static unsigned emu_vote(int kind, unsigned mask, int pred) {
    check_mask(mask);
    fiber* f = B.cur;
    int idx = (int)(f - B.f), w = idx / 32;
    B.warp[w].slot[idx % 32] = pred != 0;
    warp_barrier();
    unsigned ballot = 0;
    for (int l = 0; l < 32 && w * 32 + l < B.n; l++) {
        if ((mask >> l & 1u) && !B.f[w * 32 + l].done && B.warp[w].slot[l]) ballot |= 1u << l;
    }
    warp_barrier();
    unsigned active = 0;
    for (int l = 0; l < 32 && w * 32 + l < B.n; l++) {
        if ((mask >> l & 1u) && !B.f[w * 32 + l].done) active |= 1u << l;
    }
    switch (kind) {
    case MEMFIT_VOTE_ALL: return (ballot & active) == active;
    case MEMFIT_VOTE_ANY: return ballot != 0;
    }
    return ballot;
}

static float bf16_to_f32(uint16_t h);
static float f16_to_f32(uint16_t h);

// mma_product computes the product of warp w's fragments into its d
// (kernel.h: the layout, and the order of the sums).
static void mma_product(int w) {
    float A[16][16], Bm[16][8], C[16][8];
    float (*cvt)(uint16_t) = B.warp[w].type[0] == MEMFIT_MMA_BF16 ? bf16_to_f32 : f16_to_f32;
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        const unsigned* a = B.warp[w].a[l];
        const unsigned* b = B.warp[w].b[l];
        for (int h = 0; h < 2; h++) {
            A[g][2 * t + h] = cvt((uint16_t)(a[0] >> (16 * h)));
            A[g + 8][2 * t + h] = cvt((uint16_t)(a[1] >> (16 * h)));
            A[g][2 * t + 8 + h] = cvt((uint16_t)(a[2] >> (16 * h)));
            A[g + 8][2 * t + 8 + h] = cvt((uint16_t)(a[3] >> (16 * h)));
            Bm[2 * t + h][g] = cvt((uint16_t)(b[0] >> (16 * h)));
            Bm[2 * t + 8 + h][g] = cvt((uint16_t)(b[1] >> (16 * h)));
            C[g][2 * t + h] = B.warp[w].c[l][h];
            C[g + 8][2 * t + h] = B.warp[w].c[l][2 + h];
        }
    }
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        for (int e = 0; e < 4; e++) {
            int i = g + 8 * (e >> 1), j = 2 * t + (e & 1);
            float acc = C[i][j];
            for (int k = 0; k < 16; k++) {
                float p = A[i][k] * Bm[k][j];  // exact: 16-bit significands
                acc = acc + p;
            }
            B.warp[w].d[l][e] = acc;
        }
    }
}

// emu_mma is a warp collective: each lane leaves its fragments, and the
// lane that completes the warp's barrier checks that the whole warp came
// to this mma (32 live lanes, every one tagged with this generation, one
// type) and computes every lane's D. A lane woken by a barrier that
// another primitive, or a thread's end, completed finds no product for its
// generation: the warp diverged.
static void emu_mma(int type, const unsigned* a, const unsigned* b, const float* c, float* d) {
    fiber* f = B.cur;
    int idx = (int)(f - B.f), w = idx / 32, lane = idx % 32;
    if (type != MEMFIT_MMA_BF16 && type != MEMFIT_MMA_F16) fail(CUDA_ERROR_LAUNCH_FAILED, "mma of an unknown type", 0);
    unsigned long long g = B.warp[w].gen;
    memcpy(B.warp[w].a[lane], a, sizeof B.warp[w].a[lane]);
    memcpy(B.warp[w].b[lane], b, sizeof B.warp[w].b[lane]);
    memcpy(B.warp[w].c[lane], c, sizeof B.warp[w].c[lane]);
    B.warp[w].tag[lane] = g;
    B.warp[w].type[lane] = type;
    if (B.warp[w].arrived + 1 >= B.warp[w].live) {
        char detail[160] = "";
        if (B.warp[w].live < 32 || w * 32 + 32 > B.n)
            snprintf(detail, sizeof detail, "mma.sync in a warp of %d live threads: it takes all 32 lanes", B.warp[w].live);
        for (int l = 0; l < 32 && !detail[0]; l++) {
            if (B.warp[w].tag[l] != g)
                snprintf(detail, sizeof detail, "mma.sync not reached by lane %d of the warp (divergent)", l);
            else if (B.warp[w].type[l] != type)
                snprintf(detail, sizeof detail, "mma.sync of different types in lanes %d and %d", lane, l);
        }
        if (detail[0]) fail(CUDA_ERROR_LAUNCH_FAILED, detail, 0);
        mma_product(w);
        B.warp[w].done = g;
    }
    warp_barrier();
    if (B.warp[w].done != g)
        fail(CUDA_ERROR_LAUNCH_FAILED, "mma.sync not reached by every lane of the warp (divergent)", 0);
    memcpy(d, B.warp[w].d[lane], sizeof B.warp[w].d[lane]);
}

static void emu_check(const void* p, unsigned long n, int line, int rw) {
    uintptr_t a = (uintptr_t)p;
    if (counting) {
        cnt_accesses++;
        count_range(a, n, rw);
    }
    if (a >= last_block.p && a + n <= last_block.p + last_block.n) return;
    int i = find(&blocks, a, n, NULL);
    if (i >= 0) {
        last_block = blocks.v[i];
        return;
    }
    char where[256], detail[400];
    describe(where, sizeof where, (uintptr_t)p, n);
    snprintf(detail, sizeof detail, "out-of-bounds %lu-byte access at %s", n, where);
    fail(CUDA_ERROR_ILLEGAL_ADDRESS, detail, line);
}

static const memfit_emu_api api = {
    .current = (memfit_thread* const*)&B.cur_thread,
    .syncthreads = emu_syncthreads,
    .syncwarp = emu_syncwarp,
    .shfl = emu_shfl,
    .vote = emu_vote,
    .check = emu_check,
    .mma = emu_mma,
};

// ---------------------------------------------------------------- modules

typedef struct {
    void* so;
    char* shared_start;
    char* shared_stop;
} module;

int memfit_emu_module_load(const char* path, uint64_t* out) {
    void* so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        snprintf(emu_msg, sizeof emu_msg, "dlopen: %s", dlerror());
        return CUDA_ERROR_INVALID_IMAGE;
    }
    void (*bind)(const memfit_emu_api*) = (void (*)(const memfit_emu_api*))dlsym(so, "memfit_emu_bind");
    void (*shared)(char**, char**) = (void (*)(char**, char**))dlsym(so, "memfit_emu_shared");
    if (!bind || !shared) {
        snprintf(emu_msg, sizeof emu_msg, "%s was not compiled with the emulator's kernel.h", path);
        dlclose(so);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    module* m = calloc(1, sizeof *m);
    m->so = so;
    bind(&api);
    shared(&m->shared_start, &m->shared_stop);
    *out = (uint64_t)(uintptr_t)m;
    return CUDA_SUCCESS;
}

int memfit_emu_module_unload(uint64_t h) {
    module* m = (module*)(uintptr_t)h;
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    dlclose(m->so);
    free(m);
    return CUDA_SUCCESS;
}

typedef struct {
    module* m;
    void (*entry)(void**);
    char name[128];
    // counted: launches, blocks, bytes read and written, accesses
    uint64_t launches, nblocks, read, written, accesses;
} function;

// functions lists every function handed out, for the counts.
static function** functions;
static int nfunctions, capfunctions;

int memfit_emu_function(uint64_t h, const char* name, uint64_t* out) {
    module* m = (module*)(uintptr_t)h;
    char sym[160];
    snprintf(sym, sizeof sym, "memfit_entry_%s", name);
    void* e = dlsym(m->so, sym);
    if (!e) {
        snprintf(emu_msg, sizeof emu_msg, "no kernel %s in the module", name);
        return CUDA_ERROR_NOT_FOUND;
    }
    function* f = calloc(1, sizeof *f);
    f->m = m;
    f->entry = (void (*)(void**))e;
    snprintf(f->name, sizeof f->name, "%s", name);
    pthread_mutex_lock(&emu_mu);
    if (nfunctions == capfunctions) {
        int c = capfunctions ? 2 * capfunctions : 256;
        function** v = realloc(functions, (size_t)c * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&emu_mu);
            free(f);
            snprintf(emu_msg, sizeof emu_msg, "no memory for the function table");
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        functions = v;
        capfunctions = c;
    }
    functions[nfunctions++] = f;
    pthread_mutex_unlock(&emu_mu);
    *out = (uint64_t)(uintptr_t)f;
    return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- launch

static char* stacks[MAX_THREADS];

static int run_block(function* fn, unsigned bx, unsigned by, unsigned bz, unsigned gx, unsigned gy, unsigned gz,
                     unsigned tx, unsigned ty, unsigned tz, int reverse) {
    int n = (int)(tx * ty * tz);
    B.n = n;
    B.live = n;
    B.arrived = 0;
    B.gen = 0;
    for (int w = 0; w < (n + 31) / 32; w++) {
        B.warp[w].arrived = 0;
        B.warp[w].gen = 0;
        B.warp[w].live = n - w * 32 < 32 ? n - w * 32 : 32;
        B.warp[w].done = ~0ull;
        for (int l = 0; l < 32; l++) B.warp[w].tag[l] = ~0ull;
    }
    // Uninitialised shared memory reads as NaN (floats) or -1 (integers).
    if (fn->m->shared_stop > fn->m->shared_start) memset(fn->m->shared_start, 0xff, fn->m->shared_stop - fn->m->shared_start);
    for (int i = 0; i < n; i++) {
        fiber* f = &B.f[i];
        if (!stacks[i]) {
            char* s = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (s == MAP_FAILED) {
                snprintf(emu_msg, sizeof emu_msg, "no memory for the stacks of %d threads", n);
                B.failed = CUDA_ERROR_OUT_OF_MEMORY;
                return 0;
            }
            stacks[i] = s;
        }
        f->stack = stacks[i];
        f->done = 0;
        f->waiting = 0;
        f->t.thread.x = (unsigned)i % tx;
        f->t.thread.y = (unsigned)i / tx % ty;
        f->t.thread.z = (unsigned)i / (tx * ty);
        f->t.block.x = bx;
        f->t.block.y = by;
        f->t.block.z = bz;
        f->t.block_dim.x = tx;
        f->t.block_dim.y = ty;
        f->t.block_dim.z = tz;
        f->t.grid_dim.x = gx;
        f->t.grid_dim.y = gy;
        f->t.grid_dim.z = gz;
#if defined(__x86_64__)
        uint64_t* top = (uint64_t*)(f->stack + STACK_BYTES);
        top -= 2;                                // top is 16-aligned: [0] fiber_main's return slot
        top[1] = 0;
        top[0] = (uint64_t)(uintptr_t)fiber_main;  // popped by ret
        top -= 6;                                // rbp rbx r12 r13 r14 r15
        memset(top, 0, 6 * sizeof *top);
        f->sp = top;
#else
        getcontext(&f->uc);
        f->uc.uc_stack.ss_sp = f->stack;
        f->uc.uc_stack.ss_size = STACK_BYTES;
        f->uc.uc_link = NULL;
        makecontext(&f->uc, fiber_main, 0);
#endif
    }
    B.entry = fn->entry;
    B.kernel = fn->name;
    B.pos = reverse ? n : -1;
    B.dir = reverse ? -1 : 1;
    B.cur = &B.f[next_thread()];
    B.cur_thread = &B.cur->t;
    // Run until no thread can: all finished, a failure, or a deadlock.
#if defined(__x86_64__)
    memfit_emu_switch(&B.sched_sp, B.cur->sp);
#else
    swapcontext(&B.sched_uc, &B.cur->uc);
#endif
    if (B.failed) return 0;
    if (B.live > 0) {
        snprintf(emu_msg, sizeof emu_msg,
                 "%s: block (%u,%u,%u) deadlocks: %d threads wait at barriers that the others never reach", fn->name,
                 bx, by, bz, B.live);
        B.failed = CUDA_ERROR_LAUNCH_FAILED;
        return 0;
    }
    return 1;
}

int memfit_emu_launch(uint64_t fh, unsigned gx, unsigned gy, unsigned gz, unsigned tx, unsigned ty, unsigned tz,
                      void** params) {
    function* fn = (function*)(uintptr_t)fh;
    if (!fn) return CUDA_ERROR_INVALID_HANDLE;
    if (tx * ty * tz == 0 || tx * ty * tz > MAX_THREADS || gx * gy * gz == 0) {
        snprintf(emu_msg, sizeof emu_msg, "%s: launch of (%u,%u,%u) blocks of (%u,%u,%u) threads", fn->name, gx, gy, gz,
                 tx, ty, tz);
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&emu_mu);
    B.params = params;
    B.failed = 0;
    int ok = 1, reverse = 0;
    for (unsigned z = 0; ok && z < gz; z++)
        for (unsigned y = 0; ok && y < gy; y++)
            for (unsigned x = 0; ok && x < gx; x++) {
                ok = run_block(fn, x, y, z, gx, gy, gz, tx, ty, tz, reverse);
                reverse = !reverse;
            }
    B.cur = NULL;
    B.cur_thread = NULL;
    if (counting) {
        fn->launches++;
        fn->nblocks += (uint64_t)gx * gy * gz;
        flush(&fn->read, &fn->written, &fn->accesses);
    }
    pthread_mutex_unlock(&emu_mu);
    return ok ? CUDA_SUCCESS : B.failed;
}

// ---------------------------------------------------------------- cuBLAS
//
// cublasGemmEx and its strided batch, by definition: column-major
// operands, C = alpha·op(A)·op(B) + beta·C, products summed in k order in
// the compute type (float for the 32F types, with inputs rounded to TF32
// for the fast TF32 one; double for 64F), C not read when beta is 0. With
// a bias, cublasLtMatmul's bias epilogue: bias[i] added to row i of every
// column in the compute type, then one rounding to C's type.

static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_bf16(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40u);
    b += 0x7fffu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13);
    else if (exp == 0) {
        float m = (float)man * 5.9604644775390625e-08f;
        return sign ? -m : m;
    } else u = sign | ((exp + 112u) << 23) | (man << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_f16(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        float x;
        memcpy(&x, &a, 4);
        x *= 16777216.0f;
        uint32_t q = (uint32_t)x;
        float rem = x - (float)q;
        if (rem > 0.5f || (rem == 0.5f && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

static float tf32(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    if ((b & 0x7fffffffu) >= 0x7f800000u) return f;
    b += 0xfffu + ((b >> 13) & 1u);
    b &= ~0x1fffu;
    memcpy(&f, &b, 4);
    return f;
}

static int type_size(int t) {
    switch (t) {
    case EMU_R_32F: return 4;
    case EMU_R_64F: return 8;
    case EMU_R_16F:
    case EMU_R_16BF: return 2;
    }
    return 0;
}

static double load(uintptr_t base, int t, int64_t i) {
    switch (t) {
    case EMU_R_32F: return ((const float*)base)[i];
    case EMU_R_64F: return ((const double*)base)[i];
    case EMU_R_16F: return f16_to_f32(((const uint16_t*)base)[i]);
    case EMU_R_16BF: return bf16_to_f32(((const uint16_t*)base)[i]);
    }
    return 0;
}

static void store(uintptr_t base, int t, int64_t i, double v) {
    switch (t) {
    case EMU_R_32F: ((float*)base)[i] = (float)v; break;
    case EMU_R_64F: ((double*)base)[i] = v; break;
    case EMU_R_16F: ((uint16_t*)base)[i] = f32_to_f16((float)v); break;
    case EMU_R_16BF: ((uint16_t*)base)[i] = f32_to_bf16((float)v); break;
    }
}

// operand_ok checks that every element a GEMM reads or writes of one
// operand (rows×cols column-major, leading dimension ld, batch stride)
// lies in one live allocation.
static int operand_ok(const char* name, uintptr_t p, int t, int rows, int cols, int ld, int64_t stride, int batch) {
    if (rows == 0 || cols == 0) return 1;
    int64_t last = (int64_t)(rows - 1) + (int64_t)(cols - 1) * ld + stride * (batch - 1);
    char what[64];
    snprintf(what, sizeof what, "cublasGemmEx operand %s", name);
    return check_range(what, p, (size_t)(last + 1) * (size_t)type_size(t), 1);
}

// GEMMs are counted per combination of types: calls, multiply-adds,
// bytes read and written (distinct sectors of each call's operands).
#define GEMM_KINDS 32
static struct {
    int atype, btype, ctype, compute;
    uint64_t calls, fmas, read, written, accesses;
} gemm_kinds[GEMM_KINDS];
static int ngemm_kinds;

// count_operand records the columns a GEMM reads or writes of one operand
// (rows×cols column-major, leading dimension ld, batch stride).
static void count_operand(uintptr_t p, int t, int rows, int cols, int ld, int64_t stride, int batch, int rw) {
    size_t sz = (size_t)type_size(t);
    for (int64_t b = 0; b < (stride == 0 ? 1 : batch); b++)
        for (int64_t j = 0; j < cols; j++) count_range(p + (uintptr_t)((b * stride + j * ld) * (int64_t)sz), (size_t)rows * sz, rw);
}

static void count_gemm(int transA, int transB, int m, int n, int k, uint64_t a, int atype, int lda, int64_t strideA,
                       uint64_t b, int btype, int ldb, int64_t strideB, double beta, uint64_t c, int ctype, int ldc,
                       int64_t strideC, int batch, int compute) {
    int i = 0;
    while (i < ngemm_kinds && !(gemm_kinds[i].atype == atype && gemm_kinds[i].btype == btype &&
                                gemm_kinds[i].ctype == ctype && gemm_kinds[i].compute == compute))
        i++;
    if (i == GEMM_KINDS) return;
    if (i == ngemm_kinds) {
        ngemm_kinds++;
        gemm_kinds[i].atype = atype;
        gemm_kinds[i].btype = btype;
        gemm_kinds[i].ctype = ctype;
        gemm_kinds[i].compute = compute;
    }
    count_operand((uintptr_t)a, atype, transA ? k : m, transA ? m : k, lda, strideA, batch, MEMFIT_READ);
    count_operand((uintptr_t)b, btype, transB ? n : k, transB ? k : n, ldb, strideB, batch, MEMFIT_READ);
    count_operand((uintptr_t)c, ctype, m, n, ldc, strideC, batch, beta != 0 ? MEMFIT_READ | MEMFIT_WRITE : MEMFIT_WRITE);
    gemm_kinds[i].calls++;
    gemm_kinds[i].fmas += (uint64_t)m * (uint64_t)n * (uint64_t)k * (uint64_t)batch;
    flush(&gemm_kinds[i].read, &gemm_kinds[i].written, &gemm_kinds[i].accesses);
}

int memfit_emu_gemm(int transA, int transB, int m, int n, int k, double alpha, uint64_t a, int atype, int lda,
                    int64_t strideA, uint64_t b, int btype, int ldb, int64_t strideB, double beta, uint64_t c,
                    int ctype, int ldc, int64_t strideC, int batch, int compute, uint64_t bias) {
    if (m < 0 || n < 0 || k < 0 || batch < 1 || !type_size(atype) || !type_size(btype) || !type_size(ctype))
        return EMU_BLAS_INVALID_VALUE;
    if (lda < (transA ? (k > 1 ? k : 1) : (m > 1 ? m : 1)) || ldb < (transB ? (n > 1 ? n : 1) : (k > 1 ? k : 1)) ||
        ldc < (m > 1 ? m : 1))
        return EMU_BLAS_INVALID_VALUE;
    if (compute != EMU_COMPUTE_32F && compute != EMU_COMPUTE_64F && compute != EMU_COMPUTE_32F_FAST_TF32)
        return EMU_BLAS_NOT_SUPPORTED;
    // The bias epilogue: a vector of m elements of C's type, with beta 0.
    if (bias && beta != 0) return EMU_BLAS_INVALID_VALUE;
    pthread_mutex_lock(&emu_mu);
    int ok = operand_ok("A", (uintptr_t)a, atype, transA ? k : m, transA ? m : k, lda, strideA, batch) &&
             operand_ok("B", (uintptr_t)b, btype, transB ? n : k, transB ? k : n, ldb, strideB, batch) &&
             operand_ok("C", (uintptr_t)c, ctype, m, n, ldc, strideC, batch) &&
             (!bias || operand_ok("bias", (uintptr_t)bias, ctype, m, 1, m, 0, 1));
    if (ok) {
        for (int64_t bi = 0; bi < batch; bi++) {
            uintptr_t A = (uintptr_t)a + (uintptr_t)(bi * strideA * type_size(atype));
            uintptr_t Bm = (uintptr_t)b + (uintptr_t)(bi * strideB * type_size(btype));
            uintptr_t C = (uintptr_t)c + (uintptr_t)(bi * strideC * type_size(ctype));
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    double acc = 0;
                    float accf = 0;
                    for (int l = 0; l < k; l++) {
                        double x = load(A, atype, transA ? (int64_t)l + (int64_t)i * lda : (int64_t)i + (int64_t)l * lda);
                        double y = load(Bm, btype, transB ? (int64_t)j + (int64_t)l * ldb : (int64_t)l + (int64_t)j * ldb);
                        if (compute == EMU_COMPUTE_64F) acc += x * y;
                        else if (compute == EMU_COMPUTE_32F_FAST_TF32) accf += tf32((float)x) * tf32((float)y);
                        else accf += (float)x * (float)y;
                    }
                    int64_t ci = (int64_t)i + (int64_t)j * ldc;
                    if (compute == EMU_COMPUTE_64F) {
                        double v = alpha * acc;
                        if (beta != 0) v += beta * load(C, ctype, ci);
                        if (bias) v += load((uintptr_t)bias, ctype, i);
                        store(C, ctype, ci, v);
                    } else {
                        float v = (float)alpha * accf;
                        if (beta != 0) v += (float)beta * (float)load(C, ctype, ci);
                        if (bias) v += (float)load((uintptr_t)bias, ctype, i);
                        store(C, ctype, ci, v);
                    }
                }
        }
        if (counting) {
            if (bias) count_range((uintptr_t)bias, (size_t)m * (size_t)type_size(ctype), MEMFIT_READ);
            count_gemm(transA, transB, m, n, k, a, atype, lda, strideA, b, btype, ldb, strideB, beta, c, ctype, ldc,
                       strideC, batch, compute);
        }
    }
    pthread_mutex_unlock(&emu_mu);
    return ok ? EMU_BLAS_SUCCESS : EMU_BLAS_EXECUTION_FAILED;
}

// ---------------------------------------------------------------- counts

// memfit_emu_count turns counting on or off, forgetting what was counted.
void memfit_emu_count(int on) {
    pthread_mutex_lock(&emu_mu);
    counting = on;
    for (int i = 0; i < nfunctions; i++) {
        function* f = functions[i];
        f->launches = f->nblocks = f->read = f->written = f->accesses = 0;
    }
    ngemm_kinds = 0;
    memset(gemm_kinds, 0, sizeof gemm_kinds);
    memset(copy_calls, 0, sizeof copy_calls);
    memset(copy_bytes, 0, sizeof copy_bytes);
    pthread_mutex_unlock(&emu_mu);
}

// memfit_emu_kernel_count gives function i's name and counts (launches,
// blocks, bytes read, bytes written, accesses); 0 past the last.
int memfit_emu_kernel_count(int i, const char** name, uint64_t* out) {
    pthread_mutex_lock(&emu_mu);
    int ok = i >= 0 && i < nfunctions;
    if (ok) {
        function* f = functions[i];
        *name = f->name;
        out[0] = f->launches;
        out[1] = f->nblocks;
        out[2] = f->read;
        out[3] = f->written;
        out[4] = f->accesses;
    }
    pthread_mutex_unlock(&emu_mu);
    return ok;
}

// memfit_emu_gemm_count gives GEMM kind i: types (a, b, c, compute), then
// calls, multiply-adds, bytes read, bytes written; 0 past the last.
int memfit_emu_gemm_count(int i, int* types, uint64_t* out) {
    pthread_mutex_lock(&emu_mu);
    int ok = i >= 0 && i < ngemm_kinds;
    if (ok) {
        types[0] = gemm_kinds[i].atype;
        types[1] = gemm_kinds[i].btype;
        types[2] = gemm_kinds[i].ctype;
        types[3] = gemm_kinds[i].compute;
        out[0] = gemm_kinds[i].calls;
        out[1] = gemm_kinds[i].fmas;
        out[2] = gemm_kinds[i].read;
        out[3] = gemm_kinds[i].written;
    }
    pthread_mutex_unlock(&emu_mu);
    return ok;
}

// memfit_emu_copy_count gives the calls and bytes of copy kind i (host to
// device, device to host, device to device, memset); 0 past the last.
int memfit_emu_copy_count(int i, uint64_t* calls, uint64_t* bytes) {
    if (i < 0 || i >= 4) return 0;
    pthread_mutex_lock(&emu_mu);
    *calls = copy_calls[i];
    *bytes = copy_bytes[i];
    pthread_mutex_unlock(&emu_mu);
    return 1;
}
