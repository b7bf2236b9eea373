/*
 * store.c - weight stores (see sw/store.h): the header, the seqlock that
 * publishes an update whole, and the sweep of stores whose creator has
 * gone.  A shm: store's arena follows its header in the shared object; a
 * cuda: store's header is the same shared object without the arena, which
 * is device memory that the CUDA backend (libsw-cuda.so) allocates and other
 * processes map through CUDA IPC (the backend's ipc_* entries), so this
 * file links no CUDA library.  Linux-specific in two places, both said
 * where: /proc for a process's start time, /dev/shm for the list of stores.
 */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>
#include "common/internal.h"
#include "compute/backend.h"
#include "run/run_internal.h"
#include "sw/store.h"
#include "sw/audit.h"

#define MAGIC_ "SWSTORE"
#define LAYOUT_ 2u /* 2: the kind and a cuda: store's ticket */
#define HDR_SIZE_ 4096u

/*
 * The header, at offset 0 of the shared object.  Fixed-width fields, and
 * the sw_model_config as this build lays it out: cfg_size and the layout
 * version make a store from another build refuse to open rather than be
 * misread.  The atomics are lock-free 64-bit ones, which work across
 * processes because they are address-free.
 */
typedef struct hdr_ {
	char magic[8];               /* "SWSTORE\0", written last at creation */
	uint32_t layout;
	uint32_t hdr_size;           /* where the arena starts */
	uint32_t cfg_size;           /* sizeof(sw_model_config) of the maker */
	uint32_t has_cfg;
	uint64_t nfloats;
	int64_t creator_pid;
	uint64_t creator_start;      /* its start time, clock ticks after boot */
	_Atomic uint64_t seq;        /* odd while an update is open */
	_Atomic uint64_t version;    /* the last published version */
	_Atomic int64_t writer;      /* pid inside an update, 0 when none */
	_Atomic uint64_t writer_start;
	_Atomic uint32_t published;  /* 0 until the first publish */
	uint32_t kind;               /* KIND_SHM_ or KIND_CUDA_ */
	unsigned char ticket[SW_IPC_TICKET]; /* cuda: how another process maps the arena */
	sw_model_config cfg;
} hdr_;

enum { KIND_SHM_ = 0, KIND_CUDA_ = 1 };

_Static_assert(sizeof(hdr_) <= HDR_SIZE_, "the store header outgrew its page");

struct sw_store {
	char spec[SW_STORE_NAME_MAX + 8];
	hdr_ *h;
	size_t map_size;
	float *arena;
	bool writable;
	bool in_update;              /* this handle holds the open update */
	bool born;                   /* ... the one it was created in, not yet published */
	const sw_backend *be;        /* cuda: the backend whose memory the arena is; NULL for shm: */
	bool owns_dev;               /* cuda: this handle allocated the arena (ipc_free, not ipc_close) */
};

/* --- names ------------------------------------------------------------- */

static bool name_ok_(const char *n, size_t len)
{
	if (len == 0 || len > SW_STORE_NAME_MAX || n[0] == '.')
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = n[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == '-'))
			return false;
	}
	return true;
}

/* "shm:NAME" or "cuda:NAME" -> "/NAME" in path (SW_STORE_NAME_MAX + 2
 * bytes) and the KIND_* in *kind (may be NULL). */
static int parse_(const char *spec, char *path, uint32_t *kind, sw_error *err)
{
	if (!spec || !*spec)
		return sw_fail(err, SW_EINVAL, "no store given (shm:NAME)");
	const char *colon = strchr(spec, ':');
	size_t kl = colon ? (size_t)(colon - spec) : 0;
	const char *name = colon ? colon + 1 : NULL;
	bool cuda = kl == 4 && !strncmp(spec, "cuda", 4), shm = kl == 3 && !strncmp(spec, "shm", 3);
	if (colon && (cuda || shm) && name_ok_(name, strlen(name))) {
		path[0] = '/';
		strcpy(path + 1, name);
		if (kind)
			*kind = cuda ? KIND_CUDA_ : KIND_SHM_;
		return 0;
	}
	char shown[256], kshown[64]; /* a refused spec may hold anything: shown escaped */
	sw_show_text(shown, sizeof shown, spec, strlen(spec), 1);
	sw_show_text(kshown, sizeof kshown, spec, kl, 1);
	if (!colon)
		return sw_fail(err, SW_EINVAL, "store '%s': expected shm:NAME or cuda:NAME", shown);
	if (!cuda && !shm)
		return sw_fail(err, SW_EINVAL, "store '%s': unknown kind '%s' (shm:NAME or cuda:NAME)", shown, kshown);
	return sw_fail(err, SW_EINVAL,
	               "store '%s': a name is 1 to %d of letters, digits, '.', '_' and '-', not starting with '.'",
	               shown, SW_STORE_NAME_MAX);
}

/* The CUDA backend of a cuda: store, or NULL with err saying why (no driver, ...). */
static const sw_backend *cuda_be_(const char *spec, sw_error *err)
{
	sw_error e2 = { 0 };
	const sw_backend *be = sw_backend_cuda_current(&e2);
	if (!be)
		sw_fail(err, e2.code, "store '%.200s': %s", spec, e2.msg);
	else if (!be->ipc_alloc || !be->ipc_open)
		sw_fail(err, SW_EINVAL, "store '%.200s': the %s backend cannot share its memory", spec, be->name);
	return be && be->ipc_alloc && be->ipc_open ? be : NULL;
}

static int sys_(sw_error *err, int e, const char *spec, const char *what)
{
	int code = sw_fail(err, SW_EIO, "store '%.200s': %s: %s", spec, what, strerror(e));
	if (err)
		err->sys_errno = e;
	return code;
}

/* --- processes ----------------------------------------------------------- */

/*
 * The start time of pid in clock ticks after boot (field 22 of
 * /proc/PID/stat), and whether it is a zombie; 0 when it cannot be read.
 * Linux-specific: with the pid it tells a live process from a new one that
 * reuses a dead one's pid.
 */
static uint64_t start_time_(long pid, bool *zombie)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%ld/stat", pid);
	*zombie = false;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* the command name may hold spaces and ')' */
	if (!p)
		return 0;
	p++;
	char *save, *tok = strtok_r(p, " ", &save);
	for (int field = 3; tok; field++, tok = strtok_r(NULL, " ", &save)) {
		if (field == 3)
			*zombie = tok[0] == 'Z' || tok[0] == 'X';
		if (field == 22)
			return strtoull(tok, NULL, 10);
	}
	return 0;
}

/* Is the process that had this pid and start time still running? */
static bool alive_(long pid, uint64_t start)
{
	if (pid <= 0)
		return false;
	if (kill((pid_t)pid, 0) && errno == ESRCH)
		return false;
	bool zombie;
	uint64_t now = start_time_(pid, &zombie);
	if (zombie)
		return false;
	/* unreadable /proc: trust kill() */
	return now == 0 || start == 0 || now == start;
}

static uint64_t my_start_(void)
{
	bool z;
	return start_time_((long)getpid(), &z);
}

/* --- create, open, close -------------------------------------------------- */

static int check_hdr_(const hdr_ *h, uint64_t file_size, const char *spec, sw_error *err)
{
	if (memcmp(h->magic, MAGIC_, sizeof MAGIC_))
		return sw_fail(err, SW_EFORMAT, "store '%.200s': not a SafeWork store (bad magic)", spec);
	if (h->layout != LAYOUT_ || h->hdr_size != HDR_SIZE_ || h->cfg_size != sizeof(sw_model_config))
		return sw_fail(err, SW_EFORMAT,
		               "store '%.200s': layout %u (header %u, config %u bytes) is not this build's layout %u "
		               "(%u, %zu)",
		               spec, h->layout, h->hdr_size, h->cfg_size, LAYOUT_, HDR_SIZE_, sizeof(sw_model_config));
	if (h->kind != KIND_SHM_ && h->kind != KIND_CUDA_)
		return sw_fail(err, SW_EFORMAT, "store '%.200s': unknown kind %u", spec, h->kind);
	if (h->kind == KIND_SHM_ && h->nfloats > (file_size - HDR_SIZE_) / sizeof(float))
		return sw_fail(err, SW_EFORMAT, "store '%.200s': header says %llu floats, the object holds %llu bytes",
		               spec, (unsigned long long)h->nfloats, (unsigned long long)file_size);
	if (h->has_cfg) {
		sw_error e2 = { 0 };
		if (sw_model_config_check(&h->cfg, &e2))
			return sw_fail(err, SW_EFORMAT, "store '%.200s': bad model config: %s", spec, e2.msg);
		if (sw_model_config_nparams(&h->cfg) > h->nfloats)
			return sw_fail(err, SW_EFORMAT, "store '%.200s': %llu floats cannot hold the model's %zu", spec,
			               (unsigned long long)h->nfloats, sw_model_config_nparams(&h->cfg));
	}
	return 0;
}

static size_t page_up_(size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	return (n + pg - 1) / pg * pg;
}

size_t sw_store_shm_bytes(size_t nfloats)
{
	return page_up_(HDR_SIZE_ + nfloats * sizeof(float));
}


/* What /dev/shm has, and how a container has more, for a message. */
static void shm_said_(char *out, size_t n)
{
	struct statvfs v;
	char f[32], t[32];
	if (statvfs("/dev/shm", &v))
		snprintf(out, n, "/dev/shm cannot be looked at (%s)", strerror(errno));
	else
		snprintf(out, n, "/dev/shm has %s free of %s (a container's size is set by --shm-size)",
		         sw_run_size((double)v.f_bavail * (double)v.f_frsize, 1, f),
		         sw_run_size((double)v.f_blocks * (double)v.f_frsize, 1, t));
}

int sw_store_shm_room(size_t bytes, const char *what, sw_error *err)
{
	struct statvfs v;
	char said[160], b[32];
	if (statvfs("/dev/shm", &v) || (double)v.f_bavail * (double)v.f_frsize >= (double)bytes)
		return SW_OK; /* where it cannot be looked at, creating the stores says what fails */
	shm_said_(said, sizeof said);
	sw_fail(err, SW_EIO, "%s %s of shared memory, and %s", what, sw_run_size((double)bytes, 1, b), said);
	if (err)
		err->sys_errno = ENOSPC;
	return SW_EIO;
}

sw_store *sw_store_create(const char *spec, const sw_model_config *cfg, size_t nfloats, sw_error *err)
{
	char path[SW_STORE_NAME_MAX + 2];
	uint32_t kind;
	const sw_backend *be = NULL;
	if (parse_(spec, path, &kind, err) || (kind == KIND_CUDA_ && !(be = cuda_be_(spec, err))))
		return NULL;
	if (cfg) {
		if (sw_model_config_check(cfg, err))
			return NULL;
		size_t np = sw_model_config_nparams(cfg);
		if (nfloats == 0)
			nfloats = np;
		if (nfloats < np) {
			sw_fail(err, SW_EINVAL, "store '%.200s': %zu floats cannot hold the model's %zu", spec, nfloats, np);
			return NULL;
		}
	}
	if (nfloats == 0 || nfloats > (SIZE_MAX / 2 - HDR_SIZE_) / sizeof(float)) {
		sw_fail(err, SW_EINVAL, "store '%.200s': %zu floats is not a store size", spec, nfloats);
		return NULL;
	}
	/* a cuda: store's shared object is its header alone */
	size_t size = page_up_(HDR_SIZE_ + (be ? 0 : nfloats * sizeof(float)));
	int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		sys_(err, errno, spec, "cannot create");
		return NULL;
	}
	int e = 0;
	const char *what = NULL;
	if (fchmod(fd, 0600))
		e = errno, what = "cannot set mode 0600";
	else if (ftruncate(fd, (off_t)size))
		e = errno, what = "cannot size";
	else if ((e = posix_fallocate(fd, 0, (off_t)size)))
		what = "cannot reserve memory";
	void *map = MAP_FAILED;
	/* populated: the pages fallocate reserved, mapped at once (see sw_store_open) */
	if (!what && (map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)) == MAP_FAILED)
		e = errno, what = "cannot map";
	close(fd);
	sw_store *s = NULL;
	if (!what && !(s = calloc(1, sizeof *s)))
		e = ENOMEM, what = "cannot allocate";
	hdr_ *h = map;
	void *dev = NULL;
	sw_error e2 = { 0 };
	if (!what && be && !(dev = be->ipc_alloc(nfloats * sizeof(float), h->ticket, &e2))) {
		sw_fail(err, e2.code, "store '%.200s': %s", spec, e2.msg); /* every message here names the store */
		free(s);
		munmap(map, size);
		shm_unlink(path);
		return NULL;
	}
	if (what) {
		if (map != MAP_FAILED)
			munmap(map, size);
		shm_unlink(path);
		if (e == ENOSPC && kind == KIND_SHM_) { /* a full /dev/shm (a container's is 64 MB): what it has */
			char said[160], b[32];
			shm_said_(said, sizeof said);
			sw_fail(err, SW_EIO, "store '%.80s': cannot reserve %s of shared memory: %s", spec,
			        sw_run_size((double)size, 1, b), said);
			if (err)
				err->sys_errno = e;
		} else {
			sys_(err, e, spec, what);
		}
		return NULL;
	}
	h->kind = be ? KIND_CUDA_ : KIND_SHM_;
	h->layout = LAYOUT_;
	h->hdr_size = HDR_SIZE_;
	h->cfg_size = sizeof(sw_model_config);
	h->has_cfg = cfg != NULL;
	if (cfg)
		h->cfg = *cfg;
	h->nfloats = nfloats;
	h->creator_pid = getpid();
	h->creator_start = my_start_();
	/* born inside the creator's update: readers wait for its first publish */
	atomic_store_explicit(&h->writer, (int64_t)getpid(), memory_order_relaxed);
	atomic_store_explicit(&h->writer_start, h->creator_start, memory_order_relaxed);
	atomic_store_explicit(&h->seq, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	memcpy(h->magic, MAGIC_, sizeof MAGIC_);

	snprintf(s->spec, sizeof s->spec, "%s", spec);
	s->h = h;
	s->map_size = size;
	s->arena = dev ? dev : (float *)((char *)map + HDR_SIZE_);
	s->writable = true;
	s->in_update = true;
	s->born = true;
	s->be = be;
	s->owns_dev = dev != NULL;
	return s;
}

/* An opened store's arena: the shared object's (*dev NULL), or a cuda:
 * store's device memory mapped into this process. */
static int attach_(const hdr_ *h, uint32_t kind, const sw_backend *be, const char *spec, const char *name,
                   void **dev, sw_error *err)
{
	*dev = NULL;
	if (h->kind != kind)
		return sw_fail(err, SW_EFORMAT, "store '%.200s': it is a %s store: open it as %s:%s", spec,
		               h->kind == KIND_CUDA_ ? "cuda: (device memory)" : "shm: (host memory)",
		               h->kind == KIND_CUDA_ ? "cuda" : "shm", name);
	if (!be)
		return 0;
	/* CUDA maps another process's memory only: the creator has its arena already */
	if (h->creator_pid == (int64_t)getpid())
		return sw_fail(err, SW_EINVAL, "store '%.200s': its creator cannot open it again; use the creator's handle",
		               spec);
	if (!(*dev = be->ipc_open(h->ticket, err)))
		return err && err->code ? err->code : SW_EIO;
	return 0;
}

sw_store *sw_store_open(const char *spec, bool writable, sw_error *err)
{
	char path[SW_STORE_NAME_MAX + 2];
	uint32_t kind;
	const sw_backend *be = NULL;
	/* a cuda: store wants the GPU first: without one, that is what is said */
	if (parse_(spec, path, &kind, err) || (kind == KIND_CUDA_ && !(be = cuda_be_(spec, err))))
		return NULL;
	int fd = shm_open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0);
	if (fd < 0) {
		sys_(err, errno, spec, "cannot open");
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st)) {
		sys_(err, errno, spec, "cannot stat");
		close(fd);
		return NULL;
	}
	/* weights are private to the run: someone else's store is not trusted */
	if (st.st_uid != geteuid()) {
		sw_fail(err, SW_EFORMAT, "store '%.200s': owned by uid %ld, not by this user", spec, (long)st.st_uid);
		close(fd);
		return NULL;
	}
	if (st.st_mode & 077) {
		sw_fail(err, SW_EFORMAT, "store '%.200s': mode %04o lets others in; a store must be 0600", spec,
		        (unsigned)(st.st_mode & 07777));
		close(fd);
		return NULL;
	}
	if ((uint64_t)st.st_size < HDR_SIZE_) {
		sw_fail(err, SW_EFORMAT, "store '%.200s': not a SafeWork store (%lld bytes, shorter than a header)", spec,
		        (long long)st.st_size);
		close(fd);
		return NULL;
	}
	size_t size = (size_t)st.st_size;
	/* The pages are in memory already (the creator reserved them): the
	 * page tables filled here, at once, cost a fraction of a fault a
	 * page, which a stage would otherwise take on its first touch of each
	 * 4 KiB of the weights and moments, every iteration (1.0-1.3 us a
	 * fault in this VM against 0.15-0.25 us a page populated;
	 * bench/RESULTS.md "populate"). */
	void *map = mmap(NULL, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
	int e = errno;
	close(fd);
	if (map == MAP_FAILED) {
		sys_(err, e, spec, "cannot map");
		return NULL;
	}
	atomic_thread_fence(memory_order_acquire);
	sw_store *s = NULL;
	void *dev = NULL;
	if (check_hdr_(map, (uint64_t)size, spec, err) || attach_(map, kind, be, spec, path + 1, &dev, err) ||
	    !(s = calloc(1, sizeof *s))) {
		if (dev)
			be->ipc_close(dev);
		if (err && !err->code)
			sw_fail(err, SW_ENOMEM, "store '%.200s': out of memory", spec);
		munmap(map, size);
		return NULL;
	}
	snprintf(s->spec, sizeof s->spec, "%s", spec);
	s->h = map;
	s->map_size = size;
	s->arena = dev ? dev : (float *)((char *)map + HDR_SIZE_);
	s->writable = writable;
	s->be = be;
	return s;
}

void sw_store_close(sw_store *s)
{
	if (!s)
		return;
	if (s->be && s->owns_dev)
		s->be->ipc_free(s->arena);
	else if (s->be)
		s->be->ipc_close(s->arena);
	munmap(s->h, s->map_size);
	free(s);
}

int sw_store_unlink(const char *spec, sw_error *err)
{
	char path[SW_STORE_NAME_MAX + 2];
	int rc = parse_(spec, path, NULL, err);
	if (rc)
		return rc;
	if (shm_unlink(path))
		return sys_(err, errno, spec, "cannot remove");
	return 0;
}

const char *sw_store_spec(const sw_store *s)
{
	return s->spec;
}

float *sw_store_arena(sw_store *s)
{
	return s->arena;
}

size_t sw_store_nfloats(const sw_store *s)
{
	return (size_t)s->h->nfloats;
}

const sw_model_config *sw_store_config(const sw_store *s)
{
	return s->h->has_cfg ? &s->h->cfg : NULL;
}

uint64_t sw_store_version(const sw_store *s)
{
	return atomic_load_explicit(&s->h->version, memory_order_acquire);
}

long sw_store_creator(const sw_store *s)
{
	return (long)s->h->creator_pid;
}

const sw_backend *sw_store_backend(const sw_store *s)
{
	return s->be;
}

int sw_store_usable_on(const sw_store *s, const sw_backend *be, sw_error *err)
{
	if (!s->be || s->be == be)
		return 0;
	return sw_fail(err, SW_EINVAL, "a cuda: store is device memory of %s, and this process computes on %s",
	               s->be->name, sw_backend_name(be));
}

/* --- the seqlock ------------------------------------------------------------ */

int sw_store_write_begin(sw_store *s, sw_error *err)
{
	hdr_ *h = s->h;
	if (!s->writable)
		return sw_fail(err, SW_EINVAL, "store '%.200s': opened read-only", s->spec);
	if (s->in_update && s->born)
		return 0; /* the creator goes on filling the store it was born holding */
	if (s->in_update)
		return sw_fail(err, SW_EINVAL, "store '%.200s': an update is already open", s->spec);
	int64_t me = getpid(), cur = 0;
	uint64_t my_start = my_start_();
	while (!atomic_compare_exchange_strong(&h->writer, &cur, me)) {
		/* someone holds it: a live writer is a conflict, a dead one is taken over */
		uint64_t cur_start = atomic_load(&h->writer_start);
		if (alive_((long)cur, cur_start)) {
			int rc = sw_fail(err, SW_EIO, "store '%.200s': process %lld is updating it", s->spec,
			                 (long long)cur);
			if (err)
				err->sys_errno = EBUSY;
			return rc;
		}
		if (atomic_compare_exchange_strong(&h->writer, &cur, me))
			break;
	}
	atomic_store(&h->writer_start, my_start);
	uint64_t q = atomic_load_explicit(&h->seq, memory_order_relaxed);
	if (!(q & 1)) /* odd already: a dead writer's update, which we now finish */
		atomic_store_explicit(&h->seq, q + 1, memory_order_relaxed);
	/* the odd sequence is seen before any weight changes */
	atomic_thread_fence(memory_order_release);
	s->in_update = true;
	return 0;
}

int sw_store_publish(sw_store *s, uint64_t version, sw_error *err)
{
	hdr_ *h = s->h;
	if (!s->in_update)
		return sw_fail(err, SW_EINVAL, "store '%.200s': publish without an open update", s->spec);
	uint64_t cur = atomic_load_explicit(&h->version, memory_order_relaxed);
	if (atomic_load_explicit(&h->published, memory_order_relaxed) && version <= cur)
		return sw_fail(err, SW_EINVAL, "store '%.200s': version %llu does not follow %llu", s->spec,
		               (unsigned long long)version, (unsigned long long)cur);
	/* a cuda: store's weights are written by queued ops: they finish before the version moves */
	int rc = s->be ? s->be->sync(err) : 0;
	if (rc)
		return rc;
	uint64_t q = atomic_load_explicit(&h->seq, memory_order_relaxed);
	atomic_store_explicit(&h->version, version, memory_order_release);
	atomic_store_explicit(&h->published, 1, memory_order_relaxed);
	/* every weight written above is visible before the even sequence */
	atomic_store_explicit(&h->seq, q + 1, memory_order_release);
	atomic_store_explicit(&h->writer, 0, memory_order_release);
	s->in_update = false;
	s->born = false;
	return 0;
}

int sw_store_read_begin(const sw_store *s, uint64_t *seq, sw_error *err)
{
	const hdr_ *h = s->h;
	if (s->in_update) { /* the writer reading its own update */
		*seq = atomic_load_explicit(&h->seq, memory_order_acquire);
		return 0;
	}
	for (unsigned spin = 0;; spin++) {
		uint64_t q = atomic_load_explicit(&h->seq, memory_order_acquire);
		if (!(q & 1)) {
			*seq = q;
			return 0;
		}
		if (spin < 64) {
			sched_yield();
			continue;
		}
		int64_t w = atomic_load(&h->writer);
		if (w && !alive_((long)w, atomic_load(&h->writer_start)) && atomic_load(&h->seq) == q)
			return sw_fail(err, SW_EFORMAT,
			               "store '%.200s': process %lld died while updating the weights; they are torn "
			               "until a writer restores them",
			               s->spec, (long long)w);
		struct timespec ts = { 0, 200000 }; /* 0.2 ms: a training step is far longer */
		nanosleep(&ts, NULL);
	}
}

bool sw_store_read_retry(const sw_store *s, uint64_t seq)
{
	/* the reads of the weights happen before the second look at the sequence */
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(&s->h->seq, memory_order_relaxed) != seq;
}

/* --- names and the sweep ------------------------------------------------------ */

int sw_store_name_random(const char *prefix, char *buf, size_t size, sw_error *err)
{
	if (!prefix || !name_ok_(prefix, strlen(prefix)) || strlen(prefix) > SW_STORE_NAME_MAX - 33)
		return sw_fail(err, SW_EINVAL, "store name prefix '%.100s' is not a valid name", prefix ? prefix : "");
	if (sodium_init() < 0)
		return sw_fail(err, SW_EIO, "libsodium did not initialise");
	unsigned char r[16];
	randombytes_buf(r, sizeof r);
	char hex[33];
	sodium_bin2hex(hex, sizeof hex, r, sizeof r);
	int n = snprintf(buf, size, "shm:%s-%s", prefix, hex);
	if (n < 0 || (size_t)n >= size)
		return sw_fail(err, SW_ERANGE, "a buffer of %zu bytes is too small for a store name", size);
	return 0;
}

/* Is the shm object name (no '/') a store of ours whose creator is gone? */
static bool stale_(const char *name)
{
	char path[SW_STORE_NAME_MAX + 2];
	if ((size_t)snprintf(path, sizeof path, "/%s", name) >= sizeof path)
		return false;
	int fd = shm_open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
	if (fd < 0)
		return false;
	struct stat st;
	hdr_ h;
	bool stale = !fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	             st.st_size >= (off_t)HDR_SIZE_ && pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
	             !memcmp(h.magic, MAGIC_, sizeof MAGIC_) && h.layout == LAYOUT_ &&
	             !alive_((long)h.creator_pid, h.creator_start);
	close(fd);
	return stale;
}

/* Is there a store of this name whose creator is running? */
static bool live_(const char *name)
{
	char path[SW_STORE_NAME_MAX + 2];
	if ((size_t)snprintf(path, sizeof path, "/%s", name) >= sizeof path)
		return false;
	int fd = shm_open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
	if (fd < 0)
		return false;
	hdr_ h;
	bool live = pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && !memcmp(h.magic, MAGIC_, sizeof MAGIC_) &&
	            alive_((long)h.creator_pid, h.creator_start);
	close(fd);
	return live;
}

int sw_store_sweep(const char *prefix, size_t *removed, sw_error *err)
{
	size_t n = 0, pl = prefix ? strlen(prefix) : 0;
	if (removed)
		*removed = 0;
	/* Linux-specific: POSIX has no way to list shared memory objects */
	DIR *d = opendir("/dev/shm");
	if (!d)
		return sw_fail(err, SW_EIO, "/dev/shm: %s", strerror(errno));
	struct dirent *de;
	while ((de = readdir(d))) {
		const char *name = de->d_name;
		size_t nl = strlen(name);
		if (strncmp(name, prefix ? prefix : "", pl) || !name_ok_(name, nl))
			continue;
		/* NAME.mpi, a directory: the shared memory of the ranks of NAME's run (run/stores.c), its
		 * run's once NAME is gone or its creator is; not counted (not a store) */
		if (nl > 4 && !strcmp(name + nl - 4, ".mpi")) {
			char base[sizeof de->d_name], path[sizeof de->d_name + 16];
			struct stat st;
			snprintf(base, sizeof base, "%.*s", (int)(nl - 4), name);
			snprintf(path, sizeof path, "/dev/shm/%s", name);
			if (!lstat(path, &st) && S_ISDIR(st.st_mode) && st.st_uid == geteuid() && !live_(base))
				sw_run_rmtree(path);
			continue;
		}
		if (!stale_(name))
			continue;
		/* NAME.opt made by a stage that has exited belongs to NAME while NAME's creator runs */
		const char *dot = strchr(name, '.');
		char base[SW_STORE_NAME_MAX + 2], path[SW_STORE_NAME_MAX + 2];
		snprintf(base, sizeof base, "%.*s", dot ? (int)(dot - name) : 0, name);
		if (dot && live_(base))
			continue;
		if ((size_t)snprintf(path, sizeof path, "/%s", name) < sizeof path && !shm_unlink(path))
			n++;
	}
	closedir(d);
	if (removed)
		*removed = n;
	return 0;
}

/* --- model directories ------------------------------------------------------------ */

sw_store *sw_store_create_from_model(const char *spec, const char *dir, uint64_t version, sw_error *err)
{
	char path[4200];
	sw_model_config cfg;
	if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path) {
		sw_fail(err, SW_EINVAL, "%.200s: the path is too long", dir);
		return NULL;
	}
	if (sw_model_config_load(path, &cfg, err))
		return NULL;
	sw_store *s = sw_store_create(spec, &cfg, 0, err);
	if (!s)
		return NULL;
	/* a cuda: store's weights are loaded on the host, then uploaded once */
	sw_model *m = s->be ? sw_model_new(&s->h->cfg, err) : sw_model_view(&s->h->cfg, s->arena, err);
	if (!m || sw_model_load_weights(m, dir, err) ||
	    (s->be && s->be->upload(s->arena, m->arena, m->nparams * sizeof(float), err)) ||
	    sw_store_publish(s, version, err)) {
		sw_model_free(m);
		sw_store_close(s);
		sw_store_unlink(spec, NULL);
		return NULL;
	}
	sw_model_free(m);
	return s;
}

/*
 * The host's copy of the first n floats of a cuda: store's arena, one
 * published version (under the seqlock, at most 3 tries).
 */
static int download_(const sw_store *s, float *host, size_t n, const char *what, sw_error *err)
{
	for (int attempt = 0; attempt < 3; attempt++) {
		uint64_t q;
		int rc = sw_store_read_begin(s, &q, err);
		if (rc || (rc = s->be->download(host, s->arena, n * sizeof(float), err)))
			return rc;
		if (!sw_store_read_retry(s, q))
			return 0;
	}
	int rc = sw_fail(err, SW_EIO, "store '%.200s': updated during each of 3 %s", s->spec, what);
	if (err)
		err->sys_errno = EBUSY;
	return rc;
}

int sw_store_save_model(sw_store *s, const char *dir, sw_dtype dt, sw_error *err)
{
	return sw_store_save_model_with(s, dir, dt, NULL, err);
}

int sw_store_save_model_with(sw_store *s, const char *dir, sw_dtype dt, const sw_save_opts *o, sw_error *err)
{
	if (!s->h->has_cfg)
		return sw_fail(err, SW_EINVAL, "store '%.200s': holds no model configuration", s->spec);
	if (s->be) { /* device memory: a host copy of one version, saved at leisure */
		sw_model *h = sw_model_new(&s->h->cfg, err);
		int rc = !h ? (err ? err->code : SW_ENOMEM) : download_(s, h->arena, h->nparams, "saves", err);
		rc = rc ? rc : sw_model_save_with(h, dir, dt, o, err);
		sw_model_free(h);
		return rc;
	}
	sw_model *m = sw_model_view(&s->h->cfg, s->arena, err);
	if (!m)
		return err ? err->code : SW_EINVAL;
	int rc = 0;
	for (int attempt = 0;; attempt++) {
		uint64_t q;
		if ((rc = sw_store_read_begin(s, &q, err)) || (rc = sw_model_save_with(m, dir, dt, o, err)))
			break;
		if (!sw_store_read_retry(s, q))
			break;
		if (attempt == 2) {
			rc = sw_fail(err, SW_EIO, "store '%.200s': updated during each of 3 saves to '%.200s'", s->spec, dir);
			if (err)
				err->sys_errno = EBUSY;
			break;
		}
	}
	sw_model_free(m);
	return rc;
}

int sw_store_digest(const sw_store *s, char hex[65], sw_error *err)
{
	if (s->be) {
		size_t bytes = (size_t)s->h->nfloats * sizeof(float);
		float *host = malloc(bytes);
		if (!host)
			return sw_fail(err, SW_ENOMEM, "store '%.200s': out of memory for a host copy", s->spec);
		int rc = download_(s, host, s->h->nfloats, "digests", err);
		if (!rc)
			sw_digest_mem(host, bytes, hex);
		free(host);
		return rc;
	}
	for (int attempt = 0; attempt < 3; attempt++) {
		uint64_t q;
		int rc = sw_store_read_begin(s, &q, err);
		if (rc)
			return rc;
		sw_digest_mem(s->arena, (size_t)s->h->nfloats * sizeof(float), hex);
		if (!sw_store_read_retry(s, q))
			return 0;
	}
	int rc = sw_fail(err, SW_EIO, "store '%.200s': updated during each of 3 digests", s->spec);
	if (err)
		err->sys_errno = EBUSY;
	return rc;
}
