// CUDA emulation (tests only): kernel launches (CUDA C++ Programming Guide: thread
// hierarchy, __syncthreads, warp shuffle functions; Runtime API: launch limits). The
// blocks of a grid run one after another on their stream's thread; the threads of a
// block are cooperative fibers on it, each run until it waits at __syncthreads or at a
// warp exchange, so a block behaves as on a GPU: a barrier releases once every thread
// has reached it, and a shuffle exchanges values once every lane named in its mask has
// arrived. Each pass over a block's threads (its start, and after every barrier or
// exchange) takes them in a new random order, drawn from CUDA_EMU_SEED (default 1), the
// launch's number and the block's; half the blocks give each warp a turn until all its
// lanes wait at a barrier or have exited (one warp far ahead of the others), the other
// half interleave every thread. A missing barrier or __syncwarp is seen whichever side
// of a race a seed puts first, and a program that launches from one thread repeats
// exactly. A block's shared objects start with all bits set (shared_fresh), as a GPU
// gives no block the one before it's. Divergence the Programming Guide calls undefined (a
// barrier some threads never reach, lanes that disagree on a mask, a lane outside its
// own mask) faults the device.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_set>
#include <vector>

#include <cuda_fp16.h>

#include "emu.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace cuda_emu {

thread_local const thread_view *self = nullptr;

namespace {

// ---- fibers ----

// The emulation's own bookkeeping (the fibers' schedule, the warps' exchanges, an mma's
// arithmetic on the lanes' register values) reads and writes only its own state: ASan
// and UBSan are here for the kernels' accesses, and instrumenting these functions
// instead made them 40% of an ASan build's emulated attention.
#define EMU_OWN __attribute__((no_sanitize("address", "undefined")))

#if defined(__SANITIZE_ADDRESS__)
constexpr size_t STACK = 256 << 10;      // ASan's frames are large
constexpr size_t STACK_FRESH = 16 << 10; // unpoisoned when a fiber starts (prepare)
#else
constexpr size_t STACK = 64 << 10;
#endif

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack pointer in
// *from and continues on `to` (System V ABI). The SSE and x87 control words are not
// switched: the fibers share their host thread's floating-point environment, which no
// kernel changes.
extern "C" void cuda_emu_switch(void **from, void *to);
extern "C" void cuda_emu_fiber_start();
asm(R"(
    .text
    .globl cuda_emu_switch
    .type cuda_emu_switch, @function
cuda_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cuda_emu_switch, .-cuda_emu_switch

    .globl cuda_emu_fiber_start
    .type cuda_emu_fiber_start, @function
cuda_emu_fiber_start:
    callq *%r13
    ud2
    .size cuda_emu_fiber_start, .-cuda_emu_fiber_start
)");
#endif

enum state { RUNNABLE, AT_BARRIER, AT_WARP, EXITED };

// A cp.async copy not yet landed in shared memory: its group is -1 until committed.
struct async_copy {
    void *dst;
    const void *src;
    int src_bytes, group;
};

struct fiber {
    thread_view view;
    int lin; // linear thread index within the block
    state st;
    char *stack;
    std::vector<async_copy> copies; // this thread's cp.async copies not yet landed
    int groups;                     // the groups it has committed
#if defined(__x86_64__)
    void *sp;
#else
    ucontext_t ctx;
#endif
};

// The warp functions whose lanes wait for each other.
enum collective { SHUFFLE, MMA, LDMATRIX, LDMATRIX_TRANS };

// Where a warp's exchange stands: the lanes that have arrived, with their values and
// the lane each reads from. When it completes each lane's result is set aside, so that
// the lanes that go on to a later exchange (of a smaller mask, say) cannot disturb what
// a slower lane has yet to read.
struct warp {
    unsigned mask, arrived;
    unsigned live; // lanes of the warp that exist and have not exited
    int src[32];
    uint64_t val[32], result[32];
    collective kind;
    // An mma.sync: each lane's a[4], b[2], c[4] (as bits), and once complete each
    // lane's D. An ldmatrix: each lane's row address, and once complete its d[4] (bits).
    bool mma_bf16;
    uint32_t frag[32][10];
    const uint16_t *row[32];
    float d[32][4];
};

// The block being run on this thread.
struct block_run {
    const std::function<void()> *body;
    std::vector<fiber> *fibers;
    std::vector<warp> warps;
    int nthreads, at_barrier = 0, exited = 0;
    std::vector<int> order;  // this pass's order of the threads
    bool warp_turns = false; // this block's schedule: warp by warp, or thread by thread
    uint64_t random = 0;     // the state that draws the orders
    std::vector<std::pair<const char *, size_t>> fresh; // this block's shared objects (shared_fresh)
    int pos = -1;            // of the current fiber in this pass
    bool direct = false;     // threads run as plain calls, one after another
    bool cooperated = false; // a thread used __syncthreads or a warp function
    fiber *cur = nullptr;
    const char *error = nullptr; // the first undefined behaviour seen
#if defined(__x86_64__)
    void *sched_sp = nullptr;
#else
    ucontext_t sched;
#endif
    const void *sched_stack = nullptr; // for ASan
    size_t sched_stack_size = 0;
};

thread_local block_run *running = nullptr;

// The stacks of this host thread's fibers, kept for its later blocks; each has a
// guard page below it, so an overflow faults instead of corrupting its neighbour.
struct stack_pool {
    std::vector<char *> stacks;
    ~stack_pool() {
        for (char *s : stacks) {
#if defined(__SANITIZE_ADDRESS__)
            // ASan keeps the poison of the fibers' frames; the pages may come back as
            // another mapping (a large malloc) whose reads it would then report.
            __asan_unpoison_memory_region(s, STACK);
#endif
            munmap(s - getpagesize(), STACK + getpagesize());
        }
    }
    char *get(size_t i) {
        while (stacks.size() <= i) {
            size_t page = (size_t)getpagesize();
            char *m = (char *)mmap(nullptr, STACK + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED) {
                perror("cuda emulation: fiber stack");
                abort();
            }
            mprotect(m, page, PROT_NONE);
            stacks.push_back(m + page);
        }
        return stacks[i];
    }
};
thread_local stack_pool pool;

// Continues on `to` (a fiber, or the scheduler when to is null). exiting: the current
// fiber never runs again (ASan may drop its fake stack).
EMU_OWN void jump_to(fiber *from, fiber *to, bool exiting) {
    block_run *b = running;
#if defined(__SANITIZE_ADDRESS__)
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(exiting ? nullptr : &fake, to ? to->stack : b->sched_stack,
                                   to ? STACK : b->sched_stack_size);
#else
    (void)exiting;
#endif
#if defined(__x86_64__)
    cuda_emu_switch(from ? &from->sp : &b->sched_sp, to ? to->sp : b->sched_sp);
#else
    swapcontext(from ? &from->ctx : &b->sched, to ? &to->ctx : &b->sched);
#endif
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

// splitmix64 (Steele, Lea and Flood): a good 64-bit stream from any state.
EMU_OWN uint64_t draw(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Fisher-Yates over v[lo, lo + n). j is the high half of a draw times i + 1 (Lemire's
// multiply-shift: a division per swap was a sixth of the emulation's scheduling time).
EMU_OWN void shuffle_range(block_run *b, std::vector<int> &v, size_t lo, size_t n) {
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)(((unsigned __int128)draw(&b->random) * (i + 1)) >> 64);
        std::swap(v[lo + i], v[lo + j]);
    }
}

// A new order for the block's next pass: with warp turns, its warps in a random order,
// each warp's lanes together and in a random order of their own; else every thread in
// a random order.
EMU_OWN void shuffle(block_run *b) {
    if (!b->warp_turns) {
        shuffle_range(b, b->order, 0, (size_t)b->nthreads);
        return;
    }
    size_t warps = b->warps.size();
    std::vector<int> w(warps);
    for (size_t i = 0; i < warps; i++)
        w[i] = (int)i;
    shuffle_range(b, w, 0, warps);
    size_t k = 0;
    for (int wi : w) {
        size_t lo = k;
        for (int l = 0; l < 32 && wi * 32 + l < b->nthreads; l++)
            b->order[k++] = wi * 32 + l;
        shuffle_range(b, b->order, lo, k - lo);
    }
}

uint64_t base_seed() {
    static const uint64_t seed = [] {
        const char *v = getenv("CUDA_EMU_SEED");
        return v && *v ? strtoull(v, nullptr, 0) : 1;
    }();
    return seed;
}

// The next runnable fiber of this pass, in its order, or null at its end. With warp
// turns a warp keeps its turn while any of its lanes can run (an exchange they
// completed), so one warp runs as far ahead of the others as a barrier lets it: the
// schedule that shows a shared object overwritten while another warp still reads it.
// Without, a thread an exchange released runs in the next pass, interleaved with the
// other warps' threads.
EMU_OWN fiber *next_runnable(block_run *b) {
    std::vector<fiber> &fs = *b->fibers;
    for (;;) {
        // Leaving a warp's last position (the fiber that ran there just now, or one
        // passed over) goes back to its first while any of its lanes can run: the lane
        // that completes an exchange is the last of its warp to arrive and so usually
        // sits there.
        if (b->warp_turns && b->pos >= 0) {
            int wi = b->order[(size_t)b->pos] / 32;
            bool warp_end = b->pos + 1 == b->nthreads || b->order[(size_t)b->pos + 1] / 32 != wi;
            int lo = wi * 32, hi = lo + 32 < b->nthreads ? lo + 32 : b->nthreads;
            for (int t = lo; warp_end && t < hi; t++)
                if (fs[(size_t)t].st == RUNNABLE) {
                    while (b->pos > 0 && b->order[(size_t)b->pos - 1] / 32 == wi) // back to the warp's first lane
                        b->pos--;
                    b->pos--;
                    break;
                }
        }
        if (++b->pos >= b->nthreads) return nullptr;
        fiber &f = fs[(size_t)b->order[(size_t)b->pos]];
        if (f.st == RUNNABLE) return &f;
    }
}

// From fiber f straight to the pass's next runnable one (half the switches of going
// through the scheduler), or back to the scheduler at the end of the pass.
EMU_OWN void leave(fiber *f, bool exiting) {
    block_run *b = running;
    fiber *n = b->error ? nullptr : next_runnable(b);
    if (n) {
        b->cur = n;
        self = &n->view;
    }
    jump_to(f, n, exiting);
}

// Parks this fiber until an exchange or the barrier makes it runnable again.
EMU_OWN void yield(state st) {
    fiber *f = running->cur;
    f->st = st;
    leave(f, false);
}

EMU_OWN float half_bits(uint32_t h, bool bf16) {
    if (bf16) {
        uint32_t x = h << 16;
        float f;
        memcpy(&f, &x, 4);
        return f;
    }
    __half v;
    v.__x = (unsigned short)h;
    return __half2float(v);
}

// D = A B + C of a completed mma, from the lanes' fragments (PTX ISA's layouts, with
// groupID = lane / 4 and threadID_in_group = lane % 4): a_i holds A[row][col] with row
// groupID for i in {0, 1, 4, 5}, else groupID + 8, and col 2 threadID_in_group + (i & 1),
// plus 8 for i >= 4; b_i holds B[2 threadID_in_group + (i & 1) + (i >= 2 ? 8 : 0)][groupID];
// c_i and d_i are C and D at row groupID (i < 2) or groupID + 8, col
// 2 threadID_in_group + (i & 1).
EMU_OWN void mma_complete(warp &w) {
    float A[16][16], B[16][8], C[16][8];
    for (int lane = 0; lane < 32; lane++) {
        int g = lane / 4, t = lane % 4;
        const uint32_t *f = w.frag[lane];
        for (int i = 0; i < 8; i++) {
            int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8, col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
            A[row][col] = half_bits(f[i / 2] >> (16 * (i & 1)) & 0xffffu, w.mma_bf16);
        }
        for (int i = 0; i < 4; i++)
            B[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = half_bits(f[4 + i / 2] >> (16 * (i & 1)) & 0xffffu, w.mma_bf16);
        for (int i = 0; i < 4; i++)
            memcpy(&C[i < 2 ? g : g + 8][2 * t + (i & 1)], &f[6 + i], 4);
    }
    for (int lane = 0; lane < 32; lane++) {
        int g = lane / 4, t = lane % 4;
        for (int i = 0; i < 4; i++) {
            int row = i < 2 ? g : g + 8, col = 2 * t + (i & 1);
            double s = C[row][col]; // each 16-bit product exact in double; the sum rounded once
            for (int k = 0; k < 16; k++)
                s += (double)A[row][k] * B[k][col];
            w.d[lane][i] = (float)s;
        }
    }
}

// The four 8 x 8 matrices of a completed ldmatrix (PTX ISA, "ldmatrix"): lane
// 8 i + r gave the address of matrix i's row r, 8 consecutive 16-bit values. Lane
// 4 r + c gets in d_i the values at columns 2 c and 2 c + 1 of row r of matrix i, or
// with .trans of its transpose: row 2 c and 2 c + 1 of column r, the lower-numbered in
// the low half.
void ldmatrix_complete(warp &w) {
    for (int lane = 0; lane < 32; lane++) {
        int r = lane / 4, c = lane % 4;
        for (int i = 0; i < 4; i++) {
            uint32_t lo, hi;
            if (w.kind == LDMATRIX_TRANS)
                lo = w.row[8 * i + 2 * c][r], hi = w.row[8 * i + 2 * c + 1][r];
            else
                lo = w.row[8 * i + r][2 * c], hi = w.row[8 * i + r][2 * c + 1];
            w.frag[lane][i] = lo | hi << 16;
        }
    }
}

// An exchange completes once every live lane of its mask has arrived: the values are
// kept for reading and the waiting lanes resume.
EMU_OWN void settle_warp(block_run *b, warp &w, int wi) {
    unsigned need = w.mask & w.live;
    if (!w.arrived || (w.arrived & need) != need) return;
    if (w.kind == MMA) mma_complete(w);
    if (w.kind == LDMATRIX || w.kind == LDMATRIX_TRANS) ldmatrix_complete(w);
    // Reading a lane that did not take part is undefined: all bits set, loudly wrong.
    for (int l = 0; w.kind == SHUFFLE && l < 32; l++)
        if (w.arrived >> l & 1) w.result[l] = w.arrived >> w.src[l] & 1 ? w.val[w.src[l]] : ~(uint64_t)0;
    w.arrived = 0;
    for (int l = 0; l < 32; l++) {
        size_t t = (size_t)wi * 32 + (size_t)l;
        if (t < b->fibers->size() && (*b->fibers)[t].st == AT_WARP) (*b->fibers)[t].st = RUNNABLE;
    }
}

constexpr const char *DIRECT_BROKEN = "a kernel that ran without __syncthreads or warp functions used one: the "
                                      "emulation ran its threads as plain calls and cannot go on";

void undefined(block_run *b, const char *what) {
    if (!b->error) b->error = what;
}

// The body of every fiber: one thread of the block, from start to exit.
void fiber_main() {
    block_run *b = running;
    fiber *f = b->cur;
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(nullptr, &b->sched_stack, &b->sched_stack_size);
#endif
    (*b->body)();
    if (!f->copies.empty()) undefined(b, "a thread exited with cp.async copies it never waited for");
    f->st = EXITED;
    b->exited++;
    // A lane that exits no longer holds back its warp's exchange.
    warp &w = b->warps[(size_t)f->lin / 32];
    w.live &= ~(1u << (f->lin % 32));
    settle_warp(b, w, f->lin / 32);
    leave(f, true);
    abort(); // never resumed
}

void prepare(fiber *f, char *stack) {
    f->stack = stack;
    // The stacks are a page multiple apart; starting each at another 64-byte offset
    // spreads the fibers' hot frames over the cache's sets instead of one set.
    size_t top = STACK - (size_t)(f->lin * 7 % 64) * 64;
#if defined(__SANITIZE_ADDRESS__)
    // A fiber that ran on this stack before leaves through leave() and jump_to(), frames
    // that never return, so their redzones may stay poisoned just below fiber_main's
    // frame, where this fiber's kernel frames will go; a new frame writes only its own
    // redzones' shadow, so a kernel's local that lands on a stale one is reported as a
    // stack underflow (seen: an array of the attention's forward, in a stale jump_to
    // frame). Nothing near the top of a fiber that has not started is in use.
    size_t fresh = top < STACK_FRESH ? top : STACK_FRESH;
    __asan_unpoison_memory_region(stack + top - fresh, fresh);
#endif
#if defined(__x86_64__)
    // The frame cuda_emu_switch pops: r15..rbp, then the return address (the start
    // trampoline, which calls r13 with the stack 16-byte aligned).
    uint64_t *sp = (uint64_t *)(stack + top) - 9;
    sp[0] = 0, sp[1] = 0;                    // r15, r14
    sp[2] = (uint64_t)(uintptr_t)fiber_main; // r13
    sp[3] = 0, sp[4] = 0, sp[5] = 0;         // r12, rbx, rbp
    sp[6] = (uint64_t)(uintptr_t)cuda_emu_fiber_start;
    f->sp = sp;
#else
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = stack;
    f->ctx.uc_stack.ss_size = top;
    f->ctx.uc_link = nullptr;
    makecontext(&f->ctx, fiber_main, 0);
#endif
}

} // namespace

// ---- warps and barriers ----

namespace {

// The fiber of the thread calling a function that needs one (a barrier, a warp
// exchange, an mma, an ldmatrix, a cp.async): such a kernel never runs as plain calls.
// Null once the block has failed.
fiber *cooperating_fiber() {
    block_run *b = running;
    b->cooperated = true;
    if (b->direct) undefined(b, DIRECT_BROKEN);
    return b->error ? nullptr : b->cur;
}

} // namespace

EMU_OWN uint64_t warp_exchange(unsigned mask, uint64_t v, shfl_mode mode, int arg, int width) {
    block_run *b = running;
    fiber *f = cooperating_fiber();
    if (!f) return v;
    int lane = f->lin % 32, wi = f->lin / 32;
    warp &w = b->warps[(size_t)wi];
    if (!(mask >> lane & 1)) undefined(b, "a lane called a warp function with a mask that leaves it out");
    if (width < 1 || width > 32 || (width & (width - 1)))
        undefined(b, "a shuffle width that is not 1, 2, 4, 8, 16 or 32");
    if (b->error) return v;
    if (!w.arrived)
        w.mask = mask, w.kind = SHUFFLE;
    else if (w.mask != mask || w.kind != SHUFFLE)
        undefined(b, "the lanes of a warp called a warp function with different masks");
    // The source lane, within this lane's group of `width` (Programming Guide, "Warp
    // Shuffle Functions"): a lane may read an earlier group (xor), and past its own group
    // it reads its own value.
    int base = lane & ~(width - 1), src = lane;
    switch (mode) {
    case SHFL_IDX: src = base + (arg & (width - 1)); break;
    case SHFL_UP: src = lane - arg >= base ? lane - arg : lane; break;
    case SHFL_DOWN: src = lane + arg < base + width ? lane + arg : lane; break;
    case SHFL_XOR: src = (lane ^ arg) < base + width ? lane ^ arg : lane; break;
    }
    w.src[lane] = src;
    w.val[lane] = v;
    w.arrived |= 1u << lane;
    settle_warp(b, w, wi);
    if (w.arrived & (1u << lane)) yield(AT_WARP);
    return b->error ? v : w.result[lane];
}

void mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4], bool bf16) {
    block_run *r = running;
    fiber *f = cooperating_fiber();
    if (!f) return;
    int lane = f->lin % 32, wi = f->lin / 32;
    warp &w = r->warps[(size_t)wi];
    if (w.live != ~0u) undefined(r, "mma.sync in a warp without all 32 lanes");
    if (!w.arrived)
        w.mask = ~0u, w.kind = MMA, w.mma_bf16 = bf16;
    else if (w.kind != MMA || w.mma_bf16 != bf16)
        undefined(r, "the lanes of a warp called different warp functions");
    if (r->error) return;
    memcpy(w.frag[lane], a, 16);
    memcpy(w.frag[lane] + 4, b, 8);
    memcpy(w.frag[lane] + 6, c, 16);
    w.arrived |= 1u << lane;
    settle_warp(r, w, wi);
    if (w.arrived & (1u << lane)) yield(AT_WARP);
    if (!r->error) memcpy(d, w.d[lane], 16);
}

namespace {

// Whether [p, p + bytes) lies in one of the block's shared objects.
bool in_shared(const block_run *b, const void *p, size_t bytes) {
    const char *c = (const char *)p;
    for (const auto &o : b->fresh)
        if (o.first <= c && c + bytes <= o.first + o.second) return true;
    return false;
}

void land(const async_copy &c) {
    memcpy(c.dst, c.src, (size_t)c.src_bytes);
    memset((char *)c.dst + c.src_bytes, 0, (size_t)(16 - c.src_bytes));
}

} // namespace

void ldmatrix_x4(uint32_t d[4], const void *row, bool trans) {
    block_run *r = running;
    fiber *f = cooperating_fiber();
    if (!f) return;
    int lane = f->lin % 32, wi = f->lin / 32;
    warp &w = r->warps[(size_t)wi];
    collective kind = trans ? LDMATRIX_TRANS : LDMATRIX;
    if (w.live != ~0u) undefined(r, "ldmatrix in a warp without all 32 lanes");
    if (!w.arrived)
        w.mask = ~0u, w.kind = kind;
    else if (w.kind != kind)
        undefined(r, "the lanes of a warp called different warp functions");
    // The address must be in shared memory (in this block's shared objects) and the
    // row's 16 bytes aligned to 16 (PTX ISA, "ldmatrix").
    if (!in_shared(r, row, 16)) undefined(r, "ldmatrix from an address outside the block's shared memory");
    if ((uintptr_t)row % 16) undefined(r, "ldmatrix from a row not aligned to 16 bytes");
    if (r->error) return;
    w.row[lane] = (const uint16_t *)row;
    w.arrived |= 1u << lane;
    settle_warp(r, w, wi);
    if (w.arrived & (1u << lane)) yield(AT_WARP);
    if (!r->error) memcpy(d, w.frag[lane], 16);
}

void cp_async_16(void *dst, const void *src, int src_bytes) {
    block_run *b = running;
    fiber *f = cooperating_fiber();
    if (!f) return;
    if (!in_shared(b, dst, 16)) undefined(b, "cp.async to an address outside the block's shared memory");
    if ((uintptr_t)dst % 16 || (uintptr_t)src % 16)
        undefined(b, "cp.async of 16 bytes between addresses not aligned to 16");
    if (src_bytes < 0 || src_bytes > 16) undefined(b, "cp.async with a source size outside 0 to 16 bytes");
    if (b->error) return;
    async_copy c = {dst, src, src_bytes, -1};
    // A copy lands at some point before the wait that covers it: here at once or at that
    // wait, as the block's random stream draws, so that a read before the wait and a
    // copy into a tile other warps still read both show.
    if (draw(&b->random) & 1)
        land(c);
    else
        f->copies.push_back(c);
}

void cp_async_commit() {
    fiber *f = cooperating_fiber();
    if (!f) return;
    for (async_copy &c : f->copies)
        if (c.group < 0) c.group = f->groups;
    f->groups++;
}

void cp_async_wait(int pending) {
    fiber *f = cooperating_fiber();
    if (!f) return;
    std::vector<async_copy> left;
    for (const async_copy &c : f->copies)
        if (c.group >= 0 && c.group < f->groups - pending)
            land(c);
        else
            left.push_back(c);
    f->copies.swap(left);
}

void vector_access(const void *p, size_t bytes) {
    if ((uintptr_t)p % bytes) undefined(running, "a vector load or store at an address not aligned to its size");
}

void shared_fresh(void *p, size_t bytes) {
    block_run *b = running;
    if (!b) return;
    for (const auto &o : b->fresh)
        if (o.first == p) return;
    b->fresh.push_back({(const char *)p, bytes});
    memset(p, 0xff, bytes);
}

EMU_OWN void block_barrier() {
    block_run *b = running;
    if (!cooperating_fiber()) return;
    if (++b->at_barrier == b->nthreads) { // the last to arrive releases everyone
        b->at_barrier = 0;
        for (fiber &f : *b->fibers)
            if (f.st == AT_BARRIER) f.st = RUNNABLE;
        return;
    }
    yield(AT_BARRIER);
}

namespace {

// Runs one block to the end; false (with why) when its threads can no longer all go on.
bool run_block(block_run &b, std::vector<fiber> &fibers, uint3 bid, const launch_config &cfg, const char **why) {
    dim3 bd = cfg.block;
    for (int t = 0; t < b.nthreads; t++) {
        fiber &f = fibers[(size_t)t];
        f.lin = t;
        f.st = RUNNABLE;
        f.view.tid = {(unsigned)t % bd.x, (unsigned)t / bd.x % bd.y, (unsigned)t / (bd.x * bd.y)};
        f.view.bid = bid;
        f.view.bdim = bd;
        f.view.gdim = cfg.grid;
        f.copies.clear();
        f.groups = 0;
        prepare(&f, pool.get((size_t)t));
    }
    for (size_t wi = 0; wi < b.warps.size(); wi++) {
        int lanes = b.nthreads - (int)wi * 32;
        b.warps[wi] = warp{};
        b.warps[wi].live = lanes >= 32 ? ~0u : (1u << lanes) - 1;
    }
    b.at_barrier = b.exited = 0;
    // Passes over the block: the fibers hand over to each other, and the last of a
    // pass comes back here.
    for (;;) {
        shuffle(&b);
        b.pos = -1;
        fiber *f = next_runnable(&b);
        if (!f) {
            if (b.exited == b.nthreads) return true;
            *why = b.at_barrier ? "__syncthreads was not reached by every thread of the block"
                                : "a warp exchange waits for lanes that never arrive";
            return false;
        }
        b.cur = f;
        self = &f->view;
        jump_to(nullptr, f, false);
        if (b.error) {
            *why = b.error;
            return false;
        }
    }
}

// Kernels that ran a whole grid without __syncthreads or a warp function: later
// launches run their threads as plain calls, one after another, which any schedule of
// independent threads allows and which costs no switches. Should such a kernel use one
// after all, the launch faults (nothing silently wrong).
std::mutex plain_mu;
std::unordered_set<const void *> plain_kernels;

bool is_plain(const void *kernel) {
    std::lock_guard<std::mutex> g(plain_mu);
    return plain_kernels.count(kernel) != 0;
}

bool run_direct(block_run &b, uint3 bid, const launch_config &cfg) {
    thread_view v;
    v.bid = bid;
    v.bdim = cfg.block;
    v.gdim = cfg.grid;
    self = &v;
    dim3 bd = cfg.block;
    shuffle(&b);
    for (int i = 0; i < b.nthreads && !b.error; i++) {
        unsigned t = (unsigned)b.order[(size_t)i];
        v.tid = {t % bd.x, t / bd.x % bd.y, t / (bd.x * bd.y)};
        (*b.body)();
    }
    return !b.error;
}

void run_kernel(int device, const launch_config &cfg, const void *kernel, const std::function<void()> &body,
                const std::vector<const void *> &ptrs, uint64_t serial) {
    if (sticky(device)) return;
    for (size_t i = 0; i < ptrs.size(); i++) {
        if (!ptrs[i]) continue;
        region r = classify(ptrs[i], 0);
        if (r.kind == mem::registered || (r.kind == mem::device && r.device == device)) continue;
        fault(device, cudaErrorIllegalAddress, "kernel %p: pointer argument %zu (%p) is %s", kernel, i + 1, ptrs[i],
              r.kind == mem::device ? "memory of another device"
                                    : "not device memory (host, freed or never allocated)");
        return;
    }
    block_run b;
    std::vector<fiber> fibers((size_t)(cfg.block.x * cfg.block.y * cfg.block.z));
    b.body = &body;
    b.fibers = &fibers;
    b.nthreads = (int)fibers.size();
    b.warps.resize((fibers.size() + 31) / 32);
    b.order.resize(fibers.size());
    b.direct = is_plain(kernel);
    running = &b;
    uint64_t n = 0;
    for (unsigned z = 0; z < cfg.grid.z; z++)
        for (unsigned y = 0; y < cfg.grid.y; y++)
            for (unsigned x = 0; x < cfg.grid.x; x++, n++) {
                const char *why = DIRECT_BROKEN;
                b.random = base_seed() ^ serial * 0x2545f4914f6cdd1dull ^ n * 0x9e3779b97f4a7c15ull;
                for (int t = 0; t < b.nthreads; t++)
                    b.order[(size_t)t] = t;
                b.fresh.clear();
                b.warp_turns = draw(&b.random) & 1;
                bool ok = b.direct ? run_direct(b, uint3{x, y, z}, cfg) : run_block(b, fibers, uint3{x, y, z}, cfg, &why);
                if (!ok && b.direct) why = b.error; // what ended it: a warp function, or another fault
                if (!ok) {
                    fault(device, cudaErrorLaunchFailure,
                          "kernel %p, block (%u,%u,%u) of (%u,%u,%u) x (%u,%u,%u) threads: %s", kernel, x, y, z,
                          cfg.grid.x, cfg.grid.y, cfg.grid.z, cfg.block.x, cfg.block.y, cfg.block.z, why);
                    running = nullptr;
                    self = nullptr;
                    return;
                }
            }
    running = nullptr;
    self = nullptr;
    if (!b.direct && !b.cooperated) {
        std::lock_guard<std::mutex> g(plain_mu);
        plain_kernels.insert(kernel);
    }
}

} // namespace

// The limits are the device's (cudaDeviceProp); going past one is
// cudaErrorInvalidConfiguration, which the runtime also returns for too much shared
// memory (Runtime API, cudaErrorInvalidConfiguration).
void launch(const launch_config &cfg, const void *kernel, std::function<void()> body, std::vector<const void *> ptrs) {
    int device = current_device();
    cudaDeviceProp p;
    if (cudaError_t e = cudaGetDeviceProperties(&p, device)) {
        fail(e);
        return;
    }
    const dim3 &g = cfg.grid, &bl = cfg.block;
    uint64_t threads = (uint64_t)bl.x * bl.y * bl.z;
    bool ok = g.x >= 1 && g.y >= 1 && g.z >= 1 && g.x <= (unsigned)p.maxGridSize[0] &&
              g.y <= (unsigned)p.maxGridSize[1] && g.z <= (unsigned)p.maxGridSize[2] && bl.x >= 1 && bl.y >= 1 &&
              bl.z >= 1 && bl.x <= (unsigned)p.maxThreadsDim[0] && bl.y <= (unsigned)p.maxThreadsDim[1] &&
              bl.z <= (unsigned)p.maxThreadsDim[2] && threads <= (uint64_t)p.maxThreadsPerBlock &&
              cfg.smem <= p.sharedMemPerBlock;
    if (!ok) {
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    if (cfg.stream && stream_device(cfg.stream) != device) {
        fail(cudaErrorInvalidResourceHandle);
        return;
    }
    launch_config c = cfg;
    // Numbered as the host launches them, so the orders do not depend on the streams'
    // timing (launches from several host threads take their numbers as they come).
    static std::atomic<uint64_t> launches{0};
    uint64_t serial = launches++;
    enqueue(cfg.stream, [device, c, kernel, body = std::move(body), ptrs = std::move(ptrs), serial] {
        run_kernel(device, c, kernel, body, ptrs, serial);
    });
}

} // namespace cuda_emu
