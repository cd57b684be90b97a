/* ---- runtime (the same for every exported scenario) ------------------------
 *
 * A coordinator (this process) runs the scenario's statements and checks;
 * every scenario process is a worker process it forked (or that a worker
 * forked, for `fork NAME`), which makes the system calls and the loads and
 * stores in its own address space. The coordinator reads /proc/PID/maps,
 * smaps, status and pagemap, /proc/kpageflags and /proc/kpagecount, and the
 * THP counters from outside; page contents (the 64-bit tag at each page's
 * first 8 bytes) are loaded by the worker, as ptlab's live backend does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/swap.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Not every scenario uses every helper below. */
#pragma GCC diagnostic ignored "-Wunused-function"

typedef uint64_t u64;
typedef int64_t s64;

enum { OP_MMAP = 1, OP_MUNMAP, OP_MADVISE, OP_MPROTECT, OP_MREMAP, OP_ACCESS,
       OP_READ_TAG, OP_FORK, OP_EXIT, OP_UFFD_OPEN, OP_UFFD_IOCTL, OP_SYSCALL,
       OP_PRCTL, OP_SETRLIMIT, OP_CAP_DROP, OP_FILL_BYTES };

struct req { u64 op, a[7]; };
struct resp { s64 st; u64 val, aux, field; };
#define ST_FAULT (-100000)

struct proc { const char *name; int cfd, wfd; pid_t pid; int pidfd, alive, direct; };
static struct proc P[NPROC];
static int cur;

static int failures, passes;
static u64 territory[256][2];
static int nterr;

/* ---- cleanup: THP knobs, swap file, workers ------------------------------ */

struct knob { char path[160]; char old[32]; };
static struct knob knobs[16];
static volatile int nknobs;
static char swap_path[128];
static volatile int swap_on;

static void restore_all(void)
{
	for (int i = 0; i < NPROC; i++)
		if (P[i].alive && P[i].pid > 0)
			kill(P[i].pid, SIGKILL);
	for (int i = 0; i < NPROC; i++)
		if (P[i].direct && P[i].pid > 0)
			waitpid(P[i].pid, NULL, 0);
	for (int i = nknobs - 1; i >= 0; i--) {
		int fd = open(knobs[i].path, O_WRONLY);
		if (fd >= 0) {
			if (write(fd, knobs[i].old, strlen(knobs[i].old)) < 0)
				fprintf(stderr, "cannot restore %s\n", knobs[i].path);
			close(fd);
		}
	}
	nknobs = 0;
	if (swap_on) {
		swapoff(swap_path);
		unlink(swap_path);
		swap_on = 0;
	}
}

static void on_signal(int sig)
{
	restore_all();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void finish(int code)
{
	restore_all();
	exit(code);
}

static void rt_error(int line, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s:%d: runtime error: ", SCENARIO, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	finish(2);
}

/* ---- checked arithmetic (docs/language.md "Expressions") ----------------- */

static u64 x_add(u64 a, u64 b, int l) { u64 r; if (__builtin_add_overflow(a, b, &r)) rt_error(l, "arithmetic overflow: %#llx + %#llx", (unsigned long long)a, (unsigned long long)b); return r; }
static u64 x_sub(u64 a, u64 b, int l) { if (b > a) rt_error(l, "arithmetic underflow: %#llx - %#llx", (unsigned long long)a, (unsigned long long)b); return a - b; }
static u64 x_mul(u64 a, u64 b, int l) { u64 r; if (__builtin_mul_overflow(a, b, &r)) rt_error(l, "arithmetic overflow: %#llx * %#llx", (unsigned long long)a, (unsigned long long)b); return r; }
static u64 x_div(u64 a, u64 b, int l) { if (!b) rt_error(l, "division by zero"); return a / b; }
static u64 x_mod(u64 a, u64 b, int l) { if (!b) rt_error(l, "division by zero"); return a % b; }
static u64 x_shl(u64 a, u64 b, int l) { if (b >= 64 || (a << b) >> b != a) rt_error(l, "shift overflow: %#llx << %llu", (unsigned long long)a, (unsigned long long)b); return a << b; }
static u64 x_shr(u64 a, u64 b, int l) { if (b >= 64) rt_error(l, "shift by %llu", (unsigned long long)b); return a >> b; }
static u64 x_pow2(u64 a, int l) { if (!a || (a & (a - 1))) rt_error(l, "alignment %#llx is not a power of two", (unsigned long long)a); return a; }
static u64 x_align_up(u64 x, u64 a, int l) { x_pow2(a, l); return x_add(x, a - 1, l) & ~(a - 1); }
static u64 x_align_down(u64 x, u64 a, int l) { x_pow2(a, l); return x & ~(a - 1); }
static u64 folio_order(u64 size, int l) { if (size < 4096 || (size & (size - 1))) rt_error(l, "folio=%#llx: not a power-of-two size of at least 4K", (unsigned long long)size); return (u64)__builtin_ctzll(size) - 12; }
static u64 x_u32(u64 v, int l, const char *what) { if (v >> 32) rt_error(l, "%s %#llx does not fit in 32 bits", what, (unsigned long long)v); return v; }

static u64 var(int set, u64 v, const char *name, int l)
{
	if (!set)
		rt_error(l, "'%s' has no value (its binding has not run, or its syscall failed)", name);
	return v;
}

/* ---- the worker ---------------------------------------------------------- */

static int chan = -1;
static sigjmp_buf fault_jb;
static volatile u64 fault_addr, fault_sig;
static int uffds[NUFFD];

static void fault_handler(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	fault_addr = (u64)si->si_addr;
	fault_sig = (u64)sig;
	siglongjmp(fault_jb, 1);
}

static void wreply(s64 st, u64 val, u64 aux, u64 field)
{
	struct resp r = { st, val, aux, field };
	if (write(chan, &r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(0);
}

static void wsys(long r)
{
	if (r < 0)
		wreply(-errno, 0, 0, FIELD_UNTOUCHED);
	else
		wreply(0, (u64)r, 0, FIELD_UNTOUCHED);
}

/* Take the worker's own faults before the scenario's (its stack). */
static void __attribute__((noinline)) prefault_stack(void)
{
	volatile char buf[96 * 1024];
	for (size_t i = 0; i < sizeof(buf); i += 4096)
		buf[i] = 1;
}

/* Write every global the worker uses, so that its first use during the
 * scenario takes no fault (which could allocate a THP of the program's own
 * .bss and move the THP counters the scenario checks). */
static void touch_worker_globals(void)
{
	memset(&fault_jb, 0, sizeof(fault_jb));
	fault_addr = fault_addr;
	fault_sig = fault_sig;
	chan = chan;
	for (int i = 0; i < NUFFD; i++)
		((volatile int *)uffds)[i] = uffds[i];
	errno = 0;
}

/* After a fork, in parent and child: the worker's own copy-on-write faults
 * now, then drain this CPU's folio batches (MADV_COLD of a stack page:
 * madvise_cold() starts with lru_add_drain()), as ptlab's worker does. */
static void settle_after_fork(void)
{
	volatile char here = 1;
	prefault_stack();
	touch_worker_globals();
	madvise((void *)((uintptr_t)&here & ~(uintptr_t)4095), 4096, MADV_COLD);
	errno = 0;
}

static void access_range(u64 start, u64 len, int wr, int has_tag, u64 tag)
{
	volatile u64 a;
	start &= ~4095ULL;
	if (sigsetjmp(fault_jb, 1)) {
		wreply(ST_FAULT, fault_addr, fault_sig, 0);
		return;
	}
	for (a = start; a - start < len; a += 4096) {
		if (wr)
			*(volatile u64 *)(uintptr_t)a = has_tag ? tag : a;
		else
			(void)*(volatile u64 *)(uintptr_t)a;
		if (a + 4096 < a)
			break;
	}
	wreply(0, 0, 0, 0);
}

/* memset(addr, byte, len) with byte stores, page by page: a fault stops it. */
static void fill_bytes(u64 addr, u64 len, u64 byte)
{
	volatile u64 a;
	if (sigsetjmp(fault_jb, 1)) {
		wreply(ST_FAULT, fault_addr, fault_sig, 0);
		return;
	}
	for (a = addr; a - addr < len; a++)
		*(volatile unsigned char *)(uintptr_t)a = (unsigned char)byte;
	wreply(0, 0, 0, 0);
}

static void read_tag(u64 addr)
{
	if (sigsetjmp(fault_jb, 1)) {
		wreply(ST_FAULT, fault_addr, fault_sig, 0);
		return;
	}
	wreply(0, *(volatile u64 *)(uintptr_t)addr, 0, 0);
}

static void serve(void);

static void worker_fork(int child)
{
	pid_t pid = fork();
	if (pid < 0) {
		wreply(-errno, 0, 0, 0);
		return;
	}
	if (pid == 0) {
		chan = P[child].wfd;
		settle_after_fork();
		serve();
	}
	settle_after_fork();
	wreply(0, (u64)pid, 0, 0);
}

static void uffd_open(int slot, int api, int has_flags, u64 flags)
{
	int fd;
	if (uffds[slot] >= 0) {
		wreply(-EBUSY, 0, 0, 0);
		return;
	}
	if (has_flags) {
		fd = syscall(SYS_userfaultfd, (int)flags);
	} else {
		fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
		if (fd < 0) /* unprivileged: user-mode faults only */
			fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | 1);
	}
	if (fd < 0) {
		wreply(-errno, 0, 0, 0);
		return;
	}
	if (api) {
		/* UFFD_FEATURE_SIGBUS: a missing fault raises SIGBUS instead of
		 * blocking (nothing handles faults). */
		u64 a[3] = { 0xAA, UFFD_FEATURE_SIGBUS, 0 };
		if (ioctl(fd, UFFDIO_API, a) < 0) {
			int e = errno;
			close(fd);
			wreply(-e, 0, 0, 0);
			return;
		}
	}
	uffds[slot] = fd;
	wreply(0, 0, 0, 0);
}

/* a[0] slot, a[1] ioctl, a[2] words, a[3] index of the output field (or
 * 7 for none), then the words follow in a second request. */
static void uffd_ioctl(const struct req *r)
{
	struct req w;
	int fd = uffds[r->a[0]];
	u64 words[7], field = FIELD_UNTOUCHED;
	if (read(chan, &w, sizeof(w)) != (ssize_t)sizeof(w))
		_exit(0);
	memcpy(words, w.a, sizeof(words));
	if (fd < 0) {
		wreply(-EBADF, 0, 0, FIELD_UNTOUCHED);
		return;
	}
	u64 *buf = NULL;
	void *src = NULL;
	size_t srclen = 0;
	if (r->a[4]) {
		/* UFFDIO_COPY from a buffer holding the tag in every page, fenced
		 * by PROT_NONE pages and excluded from THP (the live worker's). */
		u64 pages = (words[2] + 4095) / 4096;
		srclen = (pages + 2) * 4096;
		src = mmap(NULL, srclen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (src == MAP_FAILED) {
			wreply(-errno, 0, 0, FIELD_UNTOUCHED);
			return;
		}
		buf = (u64 *)((char *)src + 4096);
		mprotect(buf, pages * 4096, PROT_READ | PROT_WRITE);
		madvise(buf, pages * 4096, MADV_NOHUGEPAGE);
		for (u64 i = 0; i < pages; i++)
			buf[i * 512] = r->a[5];
		words[1] = (u64)(uintptr_t)buf;
	}
	if (r->a[3] < 7)
		words[r->a[3]] = FIELD_UNTOUCHED;
	long rc = ioctl(fd, (unsigned long)r->a[1], words);
	int e = errno;
	if (r->a[3] < 7)
		field = words[r->a[3]];
	if (src)
		munmap(src, srclen);
	if (rc < 0)
		wreply(-e, 0, 0, field);
	else
		wreply(0, r->a[3] < 7 ? field : (r->a[1] == UFFDIO_API ? words[1] : 0), 0, field);
}

static long cap_drop(u64 cap)
{
	struct { uint32_t version; int pid; } h = { 0x20080522, 0 };
	struct { uint32_t eff, perm, inh; } d[2];
	if (syscall(SYS_capget, &h, d))
		return -errno;
	d[cap / 32].eff &= ~(1u << (cap % 32));
	if (syscall(SYS_capset, &h, d))
		return -errno;
	return 0;
}

static void serve(void)
{
	for (;;) {
		struct req r;
		const u64 *a = r.a;
		if (read(chan, &r, sizeof(r)) != (ssize_t)sizeof(r))
			_exit(0);
		switch (r.op) {
		case OP_MMAP: {
			void *p = mmap((void *)(uintptr_t)a[0], a[1], (int)a[2], (int)a[3], -1, 0);
			if (p == MAP_FAILED)
				wreply(-errno, 0, 0, 0);
			else
				wreply(0, (u64)(uintptr_t)p, 0, 0);
			break;
		}
		case OP_MUNMAP: wsys(syscall(SYS_munmap, a[0], a[1])); break;
		case OP_MADVISE: wsys(syscall(SYS_madvise, a[0], a[1], a[2])); break;
		case OP_MPROTECT: wsys(syscall(SYS_mprotect, a[0], a[1], a[2])); break;
		case OP_MREMAP: wsys(syscall(SYS_mremap, a[0], a[1], a[2], a[3], a[4])); break;
		case OP_ACCESS: access_range(a[0], a[1], (int)a[2], (int)a[3], a[4]); break;
		case OP_READ_TAG: read_tag(a[0]); break;
		case OP_FILL_BYTES: fill_bytes(a[0], a[1], a[2]); break;
		case OP_FORK: worker_fork((int)a[0]); break;
		case OP_EXIT: _exit(0);
		case OP_UFFD_OPEN: uffd_open((int)a[0], (int)a[1], (int)a[2], a[3]); break;
		case OP_UFFD_IOCTL: uffd_ioctl(&r); break;
		case OP_SYSCALL: wsys(syscall((long)a[0], a[1], a[2], a[3])); break;
		case OP_PRCTL: {
			int rc = a[0] ? prctl(PR_SET_THP_DISABLE, a[1], a[2], 0, 0)
				      : prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0);
			wsys(rc);
			break;
		}
		case OP_SETRLIMIT: {
			struct rlimit rl;
			getrlimit((int)a[0], &rl);
			rl.rlim_cur = a[1];
			if (rl.rlim_max < a[1])
				rl.rlim_max = a[1];
			wsys(setrlimit((int)a[0], &rl));
			break;
		}
		case OP_CAP_DROP: {
			long rc = cap_drop(a[0]);
			wreply(rc, 0, 0, 0);
			break;
		}
		default: wreply(-ENOSYS, 0, 0, 0);
		}
	}
}

static void worker_start(int me)
{
	struct sigaction sa;
	cpu_set_t set;
	int cpu = sched_getcpu();
	struct rlimit rl;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* The model's default RLIMIT_MEMLOCK, as ptlab's worker sets it. */
	getrlimit(RLIMIT_MEMLOCK, &rl);
	rl.rlim_cur = MLOCK_LIMIT_DEFAULT;
	if (rl.rlim_max < rl.rlim_cur)
		rl.rlim_max = rl.rlim_cur;
	setrlimit(RLIMIT_MEMLOCK, &rl);
	chan = P[me].wfd;
	for (int i = 0; i < NPROC; i++)
		close(P[i].cfd);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGCHLD, SIG_IGN);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = fault_handler;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
	/* The coordinator runs without THP (its own memory must not move the
	 * global THP counters); the scenario sees the machine's policy. */
	prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0);
	/* Pin to one CPU: copy-on-write reuse and MADV_PAGEOUT/COLD drain only
	 * the local CPU's LRU-add batch (docs/divergences.md H7, H9). */
	if (cpu >= 0) {
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		sched_setaffinity(0, sizeof(set), &set);
	}
	/* A shared one-page fence below the worker's own mappings, so the
	 * scenario's first mapping cannot merge with one of them. */
	mmap(NULL, 4096, PROT_NONE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	prefault_stack();
	touch_worker_globals();
	serve();
}

/* ---- the coordinator's side of the channel ------------------------------ */

static void send_req(int p, u64 op, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 a6)
{
	struct req r = { op, { a0, a1, a2, a3, a4, a5, a6 } };
	if (write(P[p].cfd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		rt_error(0, "cannot talk to process %s: %s", P[p].name, strerror(errno));
}

static struct resp get_resp(int p, int line)
{
	struct resp r;
	struct pollfd pf = { P[p].cfd, POLLIN, 0 };
	if (poll(&pf, 1, 60000) != 1)
		rt_error(line, "process %s did not answer within 60 s", P[p].name);
	if (read(P[p].cfd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		rt_error(line, "process %s died", P[p].name);
	return r;
}

/* What one statement did. */
struct res { int err; u64 val; int has_field; u64 field; int fault; u64 faddr; };

static struct res call(int p, int line, u64 op, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 a6)
{
	struct res o = { 0, 0, 0, 0, 0, 0 };
	if (!P[p].alive)
		rt_error(line, "process %s is not running", P[p].name);
	send_req(p, op, a0, a1, a2, a3, a4, a5, a6);
	struct resp r = get_resp(p, line);
	if (r.st == ST_FAULT) {
		o.fault = r.aux == SIGBUS ? 2 : 1; /* SIGBUS: faulted to userfaultfd */
		o.faddr = o.fault == 2 ? r.val & ~4095ULL : r.val;
	} else if (r.st < 0) {
		o.err = (int)-r.st;
		if (r.field != FIELD_UNTOUCHED) {
			o.has_field = 1;
			o.field = r.field;
		}
	} else {
		o.val = r.val;
	}
	return o;
}

static void terr_add(u64 s, u64 e)
{
	if (e <= s)
		return;
	if (nterr == 256)
		rt_error(0, "too many separate ranges mapped");
	territory[nterr][0] = s;
	territory[nterr][1] = e;
	nterr++;
	/* keep sorted and merged */
	for (int i = 0; i < nterr; i++)
		for (int j = i + 1; j < nterr; j++)
			if (territory[j][0] < territory[i][0]) {
				u64 t0 = territory[i][0], t1 = territory[i][1];
				territory[i][0] = territory[j][0];
				territory[i][1] = territory[j][1];
				territory[j][0] = t0;
				territory[j][1] = t1;
			}
	int k = 0;
	for (int i = 1; i < nterr; i++) {
		if (territory[i][0] <= territory[k][1]) {
			if (territory[i][1] > territory[k][1])
				territory[k][1] = territory[i][1];
		} else {
			k++;
			territory[k][0] = territory[i][0];
			territory[k][1] = territory[i][1];
		}
	}
	nterr = k + 1;
}

static u64 page_len(u64 len) { return len > ~4095ULL ? ~4095ULL : (len + 4095) & ~4095ULL; }

static struct res do_mmap(int p, int line, u64 addr, u64 len, u64 prot, u64 flags)
{
	struct res r = call(p, line, OP_MMAP, addr, len, prot, flags, 0, 0, 0);
	if (!r.err)
		terr_add(r.val, r.val + page_len(len));
	return r;
}

static struct res do_mremap(int p, int line, u64 addr, u64 old, u64 new_len, u64 flags, u64 new_addr)
{
	struct res r = call(p, line, OP_MREMAP, addr, old, new_len, flags, new_addr, 0, 0);
	if (flags & MREMAP_FIXED)
		terr_add(new_addr, new_addr + page_len(new_len));
	if (!r.err)
		terr_add(r.val, r.val + page_len(new_len));
	return r;
}

/* MADV_PAGEOUT only starts the writes to swap; a folio under writeback
 * cannot leave the swap cache (folio_free_swap()), so a later
 * copy-on-write would copy a page it otherwise reuses. As ptlab's live
 * harness does, wait (at most 2 s) until the device holding the swap file
 * has no request in flight. */
static void wait_swap_writeback(void)
{
	struct stat st;
	char path[96], buf[64];
	if (!swap_path[0] || stat(swap_path, &st))
		return;
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/inflight", major(st.st_dev), minor(st.st_dev));
	for (int i = 0; i < 10000; i++) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return;
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			return;
		buf[n] = 0;
		unsigned long r = 1, w = 1;
		if (sscanf(buf, "%lu %lu", &r, &w) != 2 || (r == 0 && w == 0))
			return;
		usleep(200);
	}
}

static struct res do_madvise(int p, int line, u64 addr, u64 len, u64 advice)
{
	if ((int)advice == 100 || (int)advice == 101)
		rt_error(line, "madvise advice %d (MADV_HWPOISON/MADV_SOFT_OFFLINE) is refused: it poisons or offlines a real page", (int)advice);
	struct res r = call(p, line, OP_MADVISE, addr, len, advice, 0, 0, 0, 0);
	if ((int)advice == 21) /* MADV_PAGEOUT */
		wait_swap_writeback();
	return r;
}

#define MAX_RANGE_PAGES (1ULL << 24)

static struct res do_access(int p, int line, const char *what, u64 addr, u64 len, int wr, int has_tag, u64 tag)
{
	u64 start = addr & ~4095ULL;
	if (start + len < start)
		rt_error(line, "%s: range %#llx + %#llx overflows", what, (unsigned long long)start, (unsigned long long)len);
	if ((len + 4095) / 4096 > MAX_RANGE_PAGES)
		rt_error(line, "%s: range too large", what);
	return call(p, line, OP_ACCESS, start, len, wr, has_tag, tag, 0, 0);
}

/* `write ADDR [LEN] fill BYTE`: LEN defaults to the rest of ADDR's page. */
static struct res do_fill(int p, int line, u64 addr, int has_len, u64 len, u64 byte)
{
	if (!has_len)
		len = 4096 - (addr & 4095);
	if (byte > 255)
		rt_error(line, "fill %#llx: not a byte (0..=255)", (unsigned long long)byte);
	if (addr + len < addr)
		rt_error(line, "write: range overflows");
	return call(p, line, OP_FILL_BYTES, addr, len, byte, 0, 0, 0, 0);
}

static struct res do_fork(int p, int child, int line)
{
	if (P[child].alive || P[child].pid)
		rt_error(line, "process %s exists already", P[child].name);
	struct res r = call(p, line, OP_FORK, child, 0, 0, 0, 0, 0, 0);
	if (!r.err) {
		P[child].pid = (pid_t)r.val;
		P[child].alive = 1;
		P[child].pidfd = syscall(SYS_pidfd_open, P[child].pid, 0);
	}
	return r;
}

static struct res do_exit(int p, int line)
{
	struct res r = { 0, 0, 0, 0, 0, 0 };
	if (!P[p].alive)
		rt_error(line, "process %s is not running", P[p].name);
	send_req(p, OP_EXIT, 0, 0, 0, 0, 0, 0, 0);
	if (P[p].direct) {
		waitpid(P[p].pid, NULL, 0);
	} else if (P[p].pidfd >= 0) {
		struct pollfd pf = { P[p].pidfd, POLLIN, 0 };
		poll(&pf, 1, 60000);
	}
	P[p].alive = 0;
	return r;
}

static struct res do_uffd(int p, int line, int slot, u64 nr, int field, int tagged, u64 tag,
			  u64 w0, u64 w1, u64 w2, u64 w3, u64 w4)
{
	struct res o = { 0, 0, 0, 0, 0, 0 };
	if (!P[p].alive)
		rt_error(line, "process %s is not running", P[p].name);
	send_req(p, OP_UFFD_IOCTL, slot, nr, 0, field, tagged, tag, 0);
	send_req(p, 0, w0, w1, w2, w3, w4, 0, 0);
	struct resp r = get_resp(p, line);
	if (r.st < 0) {
		o.err = (int)-r.st;
		if (field < 7 && r.field != FIELD_UNTOUCHED) {
			o.has_field = 1;
			o.field = r.field;
		}
	} else {
		o.val = r.val;
	}
	return o;
}

/* ---- THP knobs and swap -------------------------------------------------- */

/* Copy a string, cutting it to fit. */
static void copy_str(char *dst, size_t n, const char *src)
{
	size_t k = strlen(src);
	if (k >= n)
		k = n - 1;
	memcpy(dst, src, k);
	dst[k] = 0;
}

static int read_choice(const char *path, char *out, size_t n)
{
	char buf[256];
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -errno;
	ssize_t k = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (k < 0)
		return -EIO;
	buf[k] = 0;
	char *a = strchr(buf, '['), *b = a ? strchr(a, ']') : NULL;
	if (!a || !b) { /* a plain value (use_zero_page) */
		char *nl = strchr(buf, '\n');
		if (nl)
			*nl = 0;
		copy_str(out, n, buf);
	} else {
		*b = 0;
		copy_str(out, n, a + 1);
	}
	return 0;
}

/* 0, or the errno the knob write failed with. The old value is put back on
 * every exit path (atexit, signals, runtime errors). */
static int knob_set(int line, const char *path, const char *mode)
{
	char old[32];
	int e = read_choice(path, old, sizeof(old));
	if (e)
		return -e;
	if (!strcmp(old, mode))
		return 0;
	int i;
	for (i = 0; i < nknobs && strcmp(knobs[i].path, path); i++)
		;
	if (i == nknobs) {
		if (nknobs == 16)
			rt_error(line, "too many knobs");
		copy_str(knobs[i].path, sizeof(knobs[i].path), path);
		copy_str(knobs[i].old, sizeof(knobs[i].old), old);
		nknobs++;
	}
	int fd = open(path, O_WRONLY);
	if (fd < 0)
		e = errno;
	else if (write(fd, mode, strlen(mode)) < 0)
		e = errno;
	if (fd >= 0)
		close(fd);
	if (e == EACCES || e == EPERM)
		rt_error(line, "cannot write %s: %s (run as root)", path, strerror(e));
	return e;
}

static struct res do_thp(int line, const char *path, const char *mode)
{
	struct res r = { 0, 0, 0, 0, 0, 0 };
	if (access(path, F_OK)) {
		r.err = ENOENT;
		return r;
	}
	r.err = knob_set(line, path, mode);
	return r;
}

static struct res do_use_zero_page(int line, int on)
{
	struct res r = { 0, 0, 0, 0, 0, 0 };
	char cur[32];
	if (read_choice(THP_DIR "/use_zero_page", cur, sizeof(cur)))
		rt_error(line, "cannot read use_zero_page");
	if (atoi(cur) != on)
		rt_error(line, "use_zero_page is %s on this machine; the live backend only writes the THP 'enabled' knobs", cur);
	return r;
}

static u64 swap_used_pages(void)
{
	char line[512];
	u64 used = 0;
	FILE *f = fopen("/proc/swaps", "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char name[256];
		unsigned long long size, u;
		if (sscanf(line, "%255s %*s %llu %llu", name, &size, &u) == 3 && !strcmp(name, swap_path))
			used = u / 4;
	}
	fclose(f);
	return used;
}

/* The swap header mkswap writes (include/linux/swap.h union swap_header). */
static struct res do_swap(int line, u64 bytes)
{
	struct res r = { 0, 0, 0, 0, 0, 0 };
	u64 pages = bytes / 4096;
	static char hdr[4096];
	(void)line;
	if (swap_on) {
		if (swap_used_pages()) {
			r.err = EBUSY;
			return r;
		}
		swapoff(swap_path);
		unlink(swap_path);
		swap_on = 0;
	}
	if (!bytes)
		return r;
	mkdir(SWAP_DIR, 0700);
	snprintf(swap_path, sizeof(swap_path), SWAP_DIR "/ptlab-c-%d.swap", (int)getpid());
	int fd = open(swap_path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0)
		rt_error(line, "cannot create %s: %s", swap_path, strerror(errno));
	swap_on = 1; /* removed on exit from here on */
	memset(hdr, 0, sizeof(hdr));
	uint32_t version = 1, last = pages ? (uint32_t)(pages - 1) : 0;
	memcpy(hdr + 1024, &version, 4);
	memcpy(hdr + 1028, &last, 4);
	memcpy(hdr + 1052, "ptlab", 5);
	memcpy(hdr + 4096 - 10, "SWAPSPACE2", 10);
	int ok;
	if (!pages) {
		ok = write(fd, hdr, bytes) == (ssize_t)bytes;
	} else {
		ok = write(fd, hdr, 4096) == 4096;
		static char zeros[1 << 16];
		for (u64 left = (pages - 1) * 4096; ok && left;) {
			size_t n = left < sizeof(zeros) ? left : sizeof(zeros);
			ok = write(fd, zeros, n) == (ssize_t)n;
			left -= n;
		}
	}
	fsync(fd);
	close(fd);
	if (!ok)
		rt_error(line, "cannot write %s", swap_path);
	if (swapon(swap_path, 0x8000 | 0x7fff)) {
		r.err = errno;
		unlink(swap_path);
		swap_on = 0;
	}
	return r;
}

static struct res do_memory(int line, u64 bytes)
{
	struct res r = { 0, 0, 0, 0, 0, 0 };
	char l[256];
	unsigned long long kb = 0;
	FILE *f = fopen("/proc/meminfo", "r");
	while (f && fgets(l, sizeof(l), f))
		if (sscanf(l, "MemTotal: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	if (kb && bytes > kb * 1024) {
		printf("STOP line %d: the scenario models a machine with %llu bytes of memory; this one has %llu\n",
		       line, (unsigned long long)bytes, kb * 1024);
		finish(failures ? 1 : 0);
	}
	return r;
}

/* ---- result checks ------------------------------------------------------- */

static const char *errname(int e)
{
	switch (e) {
	case EPERM: return "EPERM"; case ENOENT: return "ENOENT"; case EINTR: return "EINTR";
	case EBADF: return "EBADF"; case EAGAIN: return "EAGAIN"; case ENOMEM: return "ENOMEM";
	case EACCES: return "EACCES"; case EFAULT: return "EFAULT"; case EBUSY: return "EBUSY";
	case EEXIST: return "EEXIST"; case ENODEV: return "ENODEV"; case EINVAL: return "EINVAL";
	case ENOSPC: return "ENOSPC"; case ESPIPE: return "ESPIPE"; case ERANGE: return "ERANGE";
	case ENOSYS: return "ENOSYS"; case EOVERFLOW: return "EOVERFLOW"; case ENOTSUP: return "ENOTSUP";
	case ESRCH: return "ESRCH"; case E2BIG: return "E2BIG"; case ENXIO: return "ENXIO";
	default: return "E?";
	}
}

static void pass(int line, const char *text)
{
	passes++;
	printf("ok line %d: %s\n", line, text);
}

static void fail(int line, const char *text, const char *fmt, ...)
{
	va_list ap;
	failures++;
	printf("FAIL line %d: %s: ", line, text);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

static const char *outcome(struct res r, char *buf, size_t n)
{
	if (r.fault == 1)
		snprintf(buf, n, "SIGSEGV at %#llx", (unsigned long long)r.faddr);
	else if (r.fault == 2)
		snprintf(buf, n, "a userfaultfd fault (SIGBUS) at %#llx", (unsigned long long)r.faddr);
	else if (r.err && r.has_field)
		snprintf(buf, n, "failure with %s (result %lld)", errname(r.err), (long long)r.field);
	else if (r.err)
		snprintf(buf, n, "failure with %s", errname(r.err));
	else
		snprintf(buf, n, "success (returned %#llx)", (unsigned long long)r.val);
	return buf;
}

/* A statement without a check line: a failure or a fault is a failure. */
static void uncovered(int line, const char *text, struct res r)
{
	char b[128];
	if (r.err || r.fault)
		fail(line, text, "expected success (no expect line covers a failure), observed %s", outcome(r, b, sizeof(b)));
}

enum { CK_OK, CK_ERRNO, CK_RET, CK_SEGV, CK_UFFD };

static void check(int line, const char *text, struct res r, int kind, u64 want)
{
	char b[128];
	int good;
	const char *exp;
	char eb[64];
	switch (kind) {
	case CK_OK: good = !r.err && !r.fault; exp = "success"; break;
	case CK_ERRNO: good = r.err == (int)want; snprintf(eb, sizeof(eb), "failure with %s", errname((int)want)); exp = eb; break;
	case CK_RET: good = !r.err && !r.fault && r.val == want; snprintf(eb, sizeof(eb), "success returning %#llx", (unsigned long long)want); exp = eb; break;
	case CK_SEGV: good = r.fault == 1; exp = "SIGSEGV"; break;
	default: good = r.fault == 2; exp = "a userfaultfd fault (SIGBUS)"; break;
	}
	if (good)
		pass(line, text);
	else
		fail(line, text, "expected %s, observed %s", exp, outcome(r, b, sizeof(b)));
}

/* ---- observation ---------------------------------------------------------- */

struct vma { u64 start, end; char perms[8]; u64 anon_huge_kb, lazyfree_kb; char flags[256]; };

static int read_smaps(int p, struct vma *v, int max)
{
	char path[64], line[1024];
	int n = 0;
	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)P[p].pid);
	FILE *f = fopen(path, "r");
	if (!f)
		rt_error(0, "cannot read %s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		unsigned long long a, b, kb;
		char perms[8];
		if (sscanf(line, "%llx-%llx %7s", &a, &b, perms) == 3) {
			if (n == max)
				break;
			memset(&v[n], 0, sizeof(v[n]));
			v[n].start = a;
			v[n].end = b;
			copy_str(v[n].perms, sizeof(v[n].perms), perms);
			n++;
		} else if (n && sscanf(line, "AnonHugePages: %llu kB", &kb) == 1) {
			v[n - 1].anon_huge_kb = kb;
		} else if (n && sscanf(line, "LazyFree: %llu kB", &kb) == 1) {
			v[n - 1].lazyfree_kb = kb;
		} else if (n && !strncmp(line, "VmFlags:", 8)) {
			copy_str(v[n - 1].flags, sizeof(v[n - 1].flags), line + 8);
		}
	}
	fclose(f);
	return n;
}

/* The VMAs clipped to the ranges the scenario mapped (the worker's own
 * mappings are not the scenario's), as the live backend shows them. */
static int clipped(int p, struct vma *out, int max)
{
	static struct vma v[4096];
	int n = read_smaps(p, v, 4096), k = 0;
	for (int i = 0; i < n; i++)
		for (int t = 0; t < nterr; t++) {
			u64 a = v[i].start > territory[t][0] ? v[i].start : territory[t][0];
			u64 b = v[i].end < territory[t][1] ? v[i].end : territory[t][1];
			if (a < b && k < max) {
				out[k] = v[i];
				out[k].start = a;
				out[k].end = b;
				k++;
			}
		}
	return k;
}

struct mline { u64 start, end; const char *perms; };

static void expect_maps(int p, int line, const char *text, const struct mline *want, int n)
{
	static struct vma v[4096];
	int k = clipped(p, v, 4096), same = k == n;
	for (int i = 0; same && i < n; i++)
		same = v[i].start == want[i].start && v[i].end == want[i].end && !strcmp(v[i].perms, want[i].perms);
	if (same) {
		pass(line, text);
		return;
	}
	fail(line, text, "maps of process %s differ (%d VMAs expected, %d observed)", P[p].name, n, k);
	printf("    expected:\n");
	for (int i = 0; i < n; i++)
		printf("      %08llx-%08llx %s\n", (unsigned long long)want[i].start, (unsigned long long)want[i].end, want[i].perms);
	printf("    observed:\n");
	for (int i = 0; i < k; i++)
		printf("      %08llx-%08llx %s\n", (unsigned long long)v[i].start, (unsigned long long)v[i].end, v[i].perms);
}

static const struct vma *vma_at(int p, u64 addr)
{
	static struct vma v[4096];
	int k = clipped(p, v, 4096);
	for (int i = 0; i < k; i++)
		if (v[i].start <= addr && addr < v[i].end)
			return &v[i];
	return NULL;
}

static void expect_vmflags(int p, int line, const char *text, u64 addr, int has, const char *const *flags, int n)
{
	const struct vma *v = vma_at(p, addr);
	char wrong[128] = "";
	if (!v) {
		fail(line, text, "expected a VMA containing %#llx, observed none", (unsigned long long)addr);
		return;
	}
	for (int i = 0; i < n; i++) {
		char pat[8];
		snprintf(pat, sizeof(pat), " %s", flags[i]);
		const char *f = strstr(v->flags, pat);
		int present = f && (f[3] == ' ' || f[3] == '\n' || f[3] == 0);
		if (present != has) {
			size_t k = strlen(wrong);
			snprintf(wrong + k, sizeof(wrong) - k, " %s", flags[i]);
		}
	}
	if (!wrong[0])
		pass(line, text);
	else
		fail(line, text, "expected VmFlags that %s%s, observed VmFlags:%s", has ? "have" : "lack", wrong, v->flags);
}

static void expect_smaps_kb(int p, int line, const char *text, u64 addr, int lazy, u64 want)
{
	const struct vma *v = vma_at(p, addr);
	if (!v) {
		fail(line, text, "expected a VMA containing %#llx, observed none", (unsigned long long)addr);
		return;
	}
	u64 kb = lazy ? v->lazyfree_kb : v->anon_huge_kb;
	if (kb * 1024 == want)
		pass(line, text);
	else
		fail(line, text, "expected %s %llu kB, observed %llu kB", lazy ? "LazyFree" : "AnonHugePages",
		     (unsigned long long)(want / 1024), (unsigned long long)kb);
}

static void expect_vmlck(int p, int line, const char *text, u64 want)
{
	char path[64], l[256];
	unsigned long long kb = 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)P[p].pid);
	FILE *f = fopen(path, "r");
	while (f && fgets(l, sizeof(l), f))
		if (sscanf(l, "VmLck: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	if (kb * 1024 == want)
		pass(line, text);
	else
		fail(line, text, "expected VmLck %llu kB, observed %llu kB", (unsigned long long)(want / 1024), kb);
}

static void expect_value(int line, const char *text, u64 l, int eq, u64 r)
{
	if ((l == r) == eq)
		pass(line, text);
	else
		fail(line, text, "expected %#llx %s %#llx", (unsigned long long)l, eq ? "==" : "!=", (unsigned long long)r);
}

/* THP counters: `SIZE/NAME` from hugepages-SIZE/stats/NAME, `vmstat/NAME`
 * from /proc/vmstat. A counter the kernel does not have reads 0. */
static s64 stat_read(const char *key)
{
	char path[256], l[256];
	long long v = 0;
	if (!strncmp(key, "vmstat/", 7)) {
		FILE *f = fopen("/proc/vmstat", "r");
		size_t n = strlen(key + 7);
		while (f && fgets(l, sizeof(l), f))
			if (!strncmp(l, key + 7, n) && l[n] == ' ') {
				v = atoll(l + n + 1);
				break;
			}
		if (f)
			fclose(f);
		return v;
	}
	const char *slash = strchr(key, '/');
	if (!slash)
		return 0;
	snprintf(path, sizeof(path), THP_DIR "/hugepages-%.*s/stats/%s", (int)(slash - key), key, slash + 1);
	FILE *f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%lld", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

static void expect_stat(int line, const char *text, const char *key, s64 base, u64 want)
{
	s64 got = stat_read(key) - base;
	if ((u64)got == want && got >= 0)
		pass(line, text);
	else
		fail(line, text, "expected %s to change by %llu, observed %lld", key, (unsigned long long)want, (long long)got);
}

/* One page as pagemap, PAGEMAP_SCAN, kpageflags and kpagecount show it. */
enum { PG_NONE, PG_ZERO, PG_HUGEZERO, PG_ANON, PG_GUARD, PG_SWAP };
struct pg { int kind; u64 pfn; unsigned order, index; int pmd, x, ax; u64 cnt, tag; };

struct scan_arg { u64 size, flags, start, end, walk_end, vec, vec_len, max_pages,
		  category_inverted, category_mask, category_anyof_mask, return_mask; };

static int kpf_fd = -1, kpc_fd = -1;

static u64 pread_word(int fd, u64 idx)
{
	u64 w = 0;
	if (pread(fd, &w, 8, (off_t)(idx * 8)) != 8)
		return 0;
	return w;
}

static void page_state(int p, u64 va, struct pg *g)
{
	char path[64];
	memset(g, 0, sizeof(*g));
	snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)P[p].pid);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		rt_error(0, "cannot read %s: %s", path, strerror(errno));
	u64 pm = pread_word(fd, va / 4096);
	if (!(pm & PM_PRESENT)) {
		close(fd);
		g->kind = pm & PM_GUARD_REGION ? PG_GUARD : pm & PM_SWAP ? PG_SWAP : PG_NONE;
		return;
	}
	u64 regions[3] = { 0, 0, 0 };
	struct scan_arg s = { sizeof(s), 0, va, va + 4096, 0, (u64)(uintptr_t)regions, 1, 0, 0, 0,
			      PAGE_IS_PRESENT | PAGE_IS_PFNZERO | PAGE_IS_HUGE,
			      PAGE_IS_PFNZERO | PAGE_IS_HUGE };
	long n = ioctl(fd, PAGEMAP_SCAN, &s);
	close(fd);
	u64 cat = n > 0 ? regions[2] : 0;
	g->pmd = !!(cat & PAGE_IS_HUGE);
	if (cat & PAGE_IS_PFNZERO) {
		g->kind = g->pmd || (pm & PM_FILE) ? PG_HUGEZERO : PG_ZERO;
		g->index = (unsigned)((va >> 12) & 511);
		return;
	}
	g->kind = PG_ANON;
	g->pfn = pm & PM_PFN_MASK;
	g->x = !!(pm & PM_MMAP_EXCLUSIVE);
	if (kpf_fd < 0) {
		kpf_fd = open("/proc/kpageflags", O_RDONLY);
		kpc_fd = open("/proc/kpagecount", O_RDONLY);
		if (kpf_fd < 0 || kpc_fd < 0)
			rt_error(0, "cannot read /proc/kpageflags and /proc/kpagecount (run as root)");
	}
	/* The folio's head is the nearest COMPOUND_HEAD frame at or before the
	 * page in its 512-frame block; its size the head and the COMPOUND_TAIL
	 * frames after it (ptlab's kernel::frame_facts_of_block). */
	u64 blk[512];
	u64 base = g->pfn & ~511ULL, o = g->pfn & 511;
	if (pread(kpf_fd, blk, sizeof(blk), (off_t)(base * 8)) != (ssize_t)sizeof(blk))
		memset(blk, 0, sizeof(blk));
	u64 f = blk[o];
	long head = -1;
	if (f & KPF_COMPOUND_TAIL) {
		for (long j = (long)o - 1; j >= 0; j--)
			if (blk[j] & KPF_COMPOUND_HEAD) {
				head = j;
				break;
			}
	} else if (f & KPF_COMPOUND_HEAD) {
		head = (long)o;
	}
	if (head >= 0) {
		u64 tails = 0;
		for (u64 j = (u64)head + 1; j < 512 && (blk[j] & KPF_COMPOUND_TAIL); j++)
			tails++;
		g->order = 63 - (unsigned)__builtin_clzll(tails + 1);
		g->index = (unsigned)(o - (u64)head);
	}
	g->ax = !!(f & KPF_ANON_EXCLUSIVE);
	g->cnt = pread_word(kpc_fd, g->pfn);
	struct res r = call(p, 0, OP_READ_TAG, va, 0, 0, 0, 0, 0, 0);
	g->tag = r.fault ? 0 : r.val;
}

static void describe(const struct pg *g, char *b, size_t n)
{
	switch (g->kind) {
	case PG_NONE: snprintf(b, n, "none"); break;
	case PG_ZERO: snprintf(b, n, "zero"); break;
	case PG_GUARD: snprintf(b, n, "guard"); break;
	case PG_SWAP: snprintf(b, n, "swapped"); break;
	case PG_HUGEZERO: snprintf(b, n, "hugezero idx=%u", g->index); break;
	default:
		snprintf(b, n, "anon order=%u idx=%u %s %s %s cnt=%llu tag=%#llx", g->order, g->index,
			 g->pmd ? "pmd" : "pte", g->x ? "X" : "!X", g->ax ? "AX" : "!AX",
			 (unsigned long long)g->cnt, (unsigned long long)g->tag);
	}
}

/* A frame handle (`NAME = pfn ADDR`): an anon page's frame, the zero page,
 * or a page of the huge zero folio. */
static u64 frame_of(const struct pg *g)
{
	if (g->kind == PG_ANON)
		return g->pfn;
	if (g->kind == PG_HUGEZERO)
		return (1ULL << 62) | g->index;
	return 1ULL << 63;
}

static u64 bind_pfn(int p, int line, u64 addr)
{
	struct pg g;
	page_state(p, addr & ~4095ULL, &g);
	if (g.kind == PG_NONE || g.kind == PG_GUARD || g.kind == PG_SWAP)
		rt_error(line, "pfn: no page is present at %#llx", (unsigned long long)addr);
	return frame_of(&g);
}

static void expect_pfn(int p, int line, const char *text, u64 addr, int eq, u64 frame)
{
	struct pg g;
	char b[160];
	page_state(p, addr & ~4095ULL, &g);
	describe(&g, b, sizeof(b));
	if (g.kind == PG_NONE)
		fail(line, text, "expected a present page at %#llx, observed none", (unsigned long long)addr);
	else if ((frame_of(&g) == frame) == eq)
		pass(line, text);
	else
		fail(line, text, "expected the page %s the bound frame, observed %s", eq ? "to be" : "not to be", b);
}

enum { A_NONE, A_ZERO, A_HUGEZERO, A_SWAPPED, A_ANON, A_ORDER, A_IDX, A_PMD, A_PTE, A_X, A_NX,
       A_AX, A_NAX, A_CNT, A_TAG, A_SAMEFOLIO, A_GUARD };
struct attr { int kind; u64 v; };

static int attr_ok(const struct attr *a, u64 k, const struct pg *g)
{
	int anon = g->kind == PG_ANON;
	switch (a->kind) {
	case A_NONE: return g->kind == PG_NONE;
	case A_ZERO: return g->kind == PG_ZERO;
	case A_HUGEZERO: return g->kind == PG_HUGEZERO;
	case A_SWAPPED: return g->kind == PG_SWAP;
	case A_ANON: return anon;
	case A_ORDER: return anon && g->order == a->v;
	case A_IDX: return (anon || g->kind == PG_HUGEZERO) && a->v + k == g->index;
	case A_PMD: return (anon && g->pmd) || g->kind == PG_HUGEZERO;
	case A_PTE: return (anon && !g->pmd) || g->kind == PG_ZERO;
	case A_X: return anon && g->x;
	case A_NX: return !(anon && g->x);
	case A_AX: return anon && g->ax;
	case A_NAX: return !(anon && g->ax);
	case A_CNT: return anon && g->cnt == a->v;
	case A_TAG: return anon ? g->tag == a->v : (g->kind == PG_ZERO || g->kind == PG_HUGEZERO) && a->v == 0;
	case A_GUARD: return g->kind == PG_GUARD;
	default: return 1;
	}
}

static const char *attr_name(const struct attr *a, u64 k, char *b, size_t n)
{
	static const char *names[] = { "none", "zero", "hugezero", "swapped", "anon", "order", "idx", "pmd",
				       "pte", "X", "!X", "AX", "!AX", "cnt", "tag", "samefolio", "guard" };
	if (a->kind == A_ORDER || a->kind == A_CNT)
		snprintf(b, n, "%s=%llu", names[a->kind], (unsigned long long)a->v);
	else if (a->kind == A_IDX)
		snprintf(b, n, "idx=%llu", (unsigned long long)(a->v + k));
	else if (a->kind == A_TAG)
		snprintf(b, n, "tag=%#llx", (unsigned long long)a->v);
	else
		snprintf(b, n, "%s", names[a->kind]);
	return b;
}

/* Append ", what" (or "what") to buf. */
static void add_want(char *buf, size_t n, const char *what)
{
	size_t k = strlen(buf);
	snprintf(buf + k, n - k, "%s%s", k ? ", " : "", what);
}

static void expect_page(int p, int line, const char *text, u64 addr, u64 len, const struct attr *at, int n)
{
	u64 start = addr & ~4095ULL, bad = 0, total = 0, first_folio = 0;
	int have_folio = 0, same = 0, shown = 0;
	char ex[4][400];
	if (start + len < start)
		rt_error(line, "expect page: range overflows");
	if ((len + 4095) / 4096 > MAX_RANGE_PAGES)
		rt_error(line, "expect page: range too large");
	for (int i = 0; i < n; i++)
		same |= at[i].kind == A_SAMEFOLIO;
	for (u64 va = start; va - start < len; va += 4096) {
		struct pg g;
		char want[300] = "", b[64], d[160];
		u64 k = (va - start) / 4096;
		page_state(p, va, &g);
		for (int i = 0; i < n; i++)
			if (!attr_ok(&at[i], k, &g))
				add_want(want, sizeof(want), attr_name(&at[i], k, b, sizeof(b)));
		if (same) {
			u64 id = g.kind == PG_ANON ? g.pfn - g.index : g.kind == PG_HUGEZERO ? ~0ULL : 0;
			int in_folio = g.kind == PG_ANON || g.kind == PG_HUGEZERO;
			if (!in_folio) {
				add_want(want, sizeof(want), "samefolio (this page is in no folio)");
			} else if (!have_folio) {
				have_folio = 1;
				first_folio = id;
			} else if (id != first_folio) {
				add_want(want, sizeof(want), "samefolio");
			}
		}
		total++;
		if (want[0]) {
			bad++;
			if (shown < 4) {
				describe(&g, d, sizeof(d));
				snprintf(ex[shown++], sizeof(ex[0]), "%#llx: expected %s; observed %s",
					 (unsigned long long)va, want, d);
			}
		}
		if (va + 4096 < va)
			break;
	}
	if (!bad) {
		pass(line, text);
		return;
	}
	fail(line, text, "%llu of %llu pages in %#llx-%#llx differ", (unsigned long long)bad,
	     (unsigned long long)total, (unsigned long long)start, (unsigned long long)(start + len));
	for (int i = 0; i < shown; i++)
		printf("    %s\n", ex[i]);
}

/* `expect bytes ADDR LEN == VALUE` (1..8 bytes, little-endian) or
 * `expect bytes ADDR LEN fill BYTE`: read without touching a page (a page
 * that is not present fails the check). */
static void expect_bytes(int p, int line, const char *text, u64 addr, u64 len, int fill, u64 want)
{
	u64 value = 0, bad = 0, first_bad = 0, page = ~0ULL, word_at = ~0ULL, word = 0;
	int first_byte = -1;
	struct pg g = { 0 };
	if (!fill && (len < 1 || len > 8))
		rt_error(line, "expect bytes ... == VALUE compares 1 to 8 bytes, not %llu", (unsigned long long)len);
	if (fill && want > 255)
		rt_error(line, "fill %#llx: not a byte (0..=255)", (unsigned long long)want);
	for (u64 a = addr; a - addr < len; a++) {
		if ((a & ~4095ULL) != page) {
			page = a & ~4095ULL;
			page_state(p, page, &g);
			if (g.kind != PG_ANON && g.kind != PG_ZERO && g.kind != PG_HUGEZERO) {
				fail(line, text, "expected bytes, observed byte %#llx in a page that is not present",
				     (unsigned long long)a);
				return;
			}
		}
		unsigned char b = 0;
		if (g.kind == PG_ANON) {
			if ((a & ~7ULL) != word_at) {
				struct res r = call(p, line, OP_READ_TAG, a & ~7ULL, 0, 0, 0, 0, 0, 0);
				if (r.fault) {
					fail(line, text, "expected bytes, observed byte %#llx unreadable", (unsigned long long)a);
					return;
				}
				word_at = a & ~7ULL;
				word = r.val;
			}
			b = (unsigned char)(word >> (8 * (a & 7)));
		}
		if (fill && b != want) {
			if (!bad++) {
				first_bad = a;
				first_byte = b;
			}
		}
		if (!fill)
			value |= (u64)b << (8 * (a - addr));
	}
	if (fill && !bad)
		pass(line, text);
	else if (fill)
		fail(line, text, "expected every byte %#04llx, observed %llu of %llu differ, the first at %#llx is %#04x",
		     (unsigned long long)want, (unsigned long long)bad, (unsigned long long)len,
		     (unsigned long long)first_bad, first_byte);
	else if (value == want)
		pass(line, text);
	else
		fail(line, text, "expected %llu bytes == %#llx, observed %#llx", (unsigned long long)len,
		     (unsigned long long)want, (unsigned long long)value);
}

/* ---- start ---------------------------------------------------------------- */

static void start(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* No THP for the coordinator: its own faults (stdio, the tables it
	 * reads /proc into) must not move the global THP counters a scenario
	 * checks. The workers switch it back on (ptlab does the same). */
	prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
	atexit(restore_all);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	signal(SIGPIPE, SIG_IGN);
	for (int i = 0; i < NPROC; i++) {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
			rt_error(0, "socketpair: %s", strerror(errno));
		P[i].name = PROC_NAMES[i];
		P[i].cfd = sv[0];
		P[i].wfd = sv[1];
		P[i].pidfd = -1;
	}
	for (int i = 0; i < NUFFD; i++)
		uffds[i] = -1;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		rt_error(0, "fork: %s", strerror(errno));
	if (pid == 0)
		worker_start(0);
	for (int i = 0; i < NPROC; i++)
		close(P[i].wfd);
	P[0].pid = pid;
	P[0].alive = 1;
	P[0].direct = 1;
	/* Wait until the worker has taken its own start-up faults, before any
	 * knob the scenario writes applies to them. */
	call(0, 0, OP_SYSCALL, SYS_getpid, 0, 0, 0, 0, 0, 0);
}

static int done(void)
{
	printf("%s: %d checks passed, %d failed\n", failures ? "FAIL" : "PASS", passes, failures);
	restore_all();
	return failures ? 1 : 0;
}
