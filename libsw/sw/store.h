/*
 * sw/store.h - weight stores: one model's parameter arena in memory that
 * several processes share, so the trainer updates weights in place and the
 * generator reads them in place, with no copy between them.
 *
 * A store is named by a spec "KIND:NAME".  "shm:NAME" is POSIX shared
 * memory (/dev/shm/NAME on Linux); "cuda:NAME" is GPU memory: its header is
 * the shared object /dev/shm/NAME as a shm: store's (so the same names, the
 * same 0600 mode, seqlock, version and sweep), and its arena is device
 * memory the CUDA backend allocates in the creating process (cudaMalloc) and
 * other processes map in place through CUDA IPC (cudaIpcOpenMemHandle): no
 * weight byte is copied between them.  A cuda: store loads the CUDA backend
 * (libsw-cuda.so) on the GPU the process computes on already (else cuda:0);
 * without it, its driver or a GPU, create and open fail saying which.  A
 * process on another GPU than the creator's is refused (the header holds
 * the GPU's PCI address).  The device memory lives while the creator holds
 * the store open (sw-run, for the whole run): a reader must close before
 * the creator does.  NAME is 1 to 200 of [A-Za-z0-9._-] and does not start
 * with '.'.
 *
 * The cuda: half is checked by tests/gpu/test_store_ipc.c where a GPU is
 * (run on an H200, 2026-12-04: all of it passed).
 *
 * Layout of a shm store: a 4096-byte header (magic "SWSTORE", the layout
 * version, the kind, the model's sw_model_config when there is one, the
 * arena size in floats, the sequence and version counters, the creator's
 * pid and start time, a cuda: store's IPC ticket), then the arena,
 * page-aligned, so sw_model_view(cfg, arena) gives a model over it in
 * place.  A cuda: store's object is the header alone.  A store is made
 * 0600 with O_EXCL, and a store that others can read or that another user
 * owns is refused on open.
 *
 * Naming: sw_store_name_random() gives "shm:PREFIX-" and 32 hex digits from
 * libsodium's randombytes (128 bits: unguessable).  A run's companion stores
 * add a suffix to the weights' name: NAME.opt for the optimiser state (any
 * size: a store need not hold a model), NAME.ref for a frozen reference.
 *
 * Updates are published with a seqlock.  The single writer brackets an
 * update with sw_store_write_begin() (the sequence becomes odd) and
 * sw_store_publish() (even again, and the version set): readers never wait
 * for a lock and never block the writer.  A reader brackets its use of the
 * weights with sw_store_read_begin(), which waits for an even sequence and
 * returns it, and sw_store_read_retry(), which says whether a write
 * overlapped; if it did, what the reader computed may mix two versions and
 * must be discarded and redone.  So a reader never *uses* a torn update.
 * The version is the trainer's count of finished steps (policy_version);
 * it moves only at publish, and only forward.
 *
 * A writer that dies mid-update leaves the sequence odd; readers are then
 * told (SW_EFORMAT naming the dead pid) rather than left waiting, and the
 * next sw_store_write_begin() takes over the store: it must rewrite every
 * weight (from a checkpoint) before it publishes.
 *
 * Stale stores: the creator's pid and its start time (from /proc) are in the
 * header; sw_store_sweep() removes this user's stores whose creator is gone,
 * which is how a run killed with SIGKILL is cleaned up at the next start.
 *
 * Ownership: sw_store_create/_open return a handle the caller frees with
 * sw_store_close() (NULL is a no-op); closing unmaps, it does not remove the
 * store (sw_store_unlink does).  The arena and config pointers live as long
 * as the handle.
 */
#ifndef SW_STORE_H
#define SW_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "backend.h"
#include "error.h"
#include "model.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef struct sw_store sw_store;

#define SW_STORE_NAME_MAX 200

/*
 * Create the store spec with an arena of nfloats floats, zeroed.  cfg may be
 * NULL (a store of plain floats, e.g. optimiser state); with a cfg, nfloats
 * 0 means sw_model_config_nparams(cfg), and fewer than that is SW_EINVAL.
 * The memory is reserved at once (posix_fallocate), so a full /dev/shm is an
 * error here, not a SIGBUS later.  An existing store of that name is SW_EIO
 * with sys_errno EEXIST.  The store is born inside an update held by its
 * creator: readers wait until the creator has filled the arena and made its
 * first sw_store_publish(), which may give any version, 0 included (a
 * sw_store_write_begin() before that first publish is a no-op).
 */
sw_store *sw_store_create(const char *spec, const sw_model_config *cfg, size_t nfloats, sw_error *err);
/* The bytes of /dev/shm a shm: store of nfloats floats takes (its header and its arena, in pages). */
size_t sw_store_shm_bytes(size_t nfloats);
/* SW_OK when /dev/shm has bytes free, else SW_EIO (sys_errno ENOSPC) saying what it has and how to make
 * it larger; what names what needs them ("the run's stores need"), in the message. */
int sw_store_shm_room(size_t bytes, const char *what, sw_error *err);
/* Open an existing store, read-only or writable.  A store that is not ours
 * (magic, layout, size, owner, mode, kind) is refused with a message saying
 * why.  A cuda: store cannot be opened by its creator (CUDA maps only
 * another process's memory), and its device memory is writable whatever
 * was asked (CUDA IPC maps it so): read-only is the caller's promise. */
sw_store *sw_store_open(const char *spec, bool writable, sw_error *err);
void sw_store_close(sw_store *s);
/* Remove the store's name; mappings that are open stay valid until closed.
 * A missing store is SW_EIO with sys_errno ENOENT. */
int sw_store_unlink(const char *spec, sw_error *err);

/* The spec it was opened by, "shm:NAME" or "cuda:NAME". */
const char *sw_store_spec(const sw_store *s);
/* The weights: host memory for shm:, device memory of sw_store_backend()
 * for cuda: (give it to sw_model_view_on on that backend, never read it). */
float *sw_store_arena(sw_store *s);
/* The backend whose device memory the arena is (cuda:), NULL for shm:. */
const sw_backend *sw_store_backend(const sw_store *s);
/* SW_OK when be computes on the arena in place: any backend for shm: (it
 * borrows host memory), only the store's own for cuda: (else SW_EINVAL
 * naming both). */
int sw_store_usable_on(const sw_store *s, const sw_backend *be, sw_error *err);
size_t sw_store_nfloats(const sw_store *s);
/* The model's configuration, or NULL for a store without one. */
const sw_model_config *sw_store_config(const sw_store *s);
/* The last published version (an acquire load: what it names is visible). */
uint64_t sw_store_version(const sw_store *s);
/* The creator's pid. */
long sw_store_creator(const sw_store *s);

/* Writer.  Only one writer at a time: a second write_begin while a live
 * writer is inside its update is SW_EIO with sys_errno EBUSY.  SW_EINVAL on
 * a read-only handle. */
int sw_store_write_begin(sw_store *s, sw_error *err);
/* End the update and publish it as version, which must exceed the current
 * one after the first publish (else SW_EINVAL, and the update stays open).
 * SW_EINVAL too when this handle has no update open. */
int sw_store_publish(sw_store *s, uint64_t version, sw_error *err);

/* Reader.  read_begin waits (yielding) while an update is open and stores in
 * *seq the sequence to pass to read_retry; it fails with SW_EFORMAT when the
 * writer died inside its update.  read_retry is true when the weights
 * changed since read_begin. */
int sw_store_read_begin(const sw_store *s, uint64_t *seq, sw_error *err);
bool sw_store_read_retry(const sw_store *s, uint64_t seq);

/*
 * Model directories (Hugging Face layout, through sw_model_load_weights and
 * sw_model_save).  create_from_model makes the store spec from dir's
 * config.json, loads the weights straight into the arena (no second copy;
 * a cuda: store's are loaded on the host and uploaded once) and publishes
 * them as version; on failure no store is left behind.  save_model and
 * digest read a cuda: store through a host copy of one version.
 * save_model writes the store's model to dir (dt SW_DT_F32 or SW_DT_BF16)
 * under the seqlock: when an update overlaps the save it is done again (at
 * most 3 times, then SW_EIO with sys_errno EBUSY), so the directory holds
 * one published version.  SW_EINVAL for a store without a model config.
 */
sw_store *sw_store_create_from_model(const char *spec, const char *dir, uint64_t version, sw_error *err);
int sw_store_save_model(sw_store *s, const char *dir, sw_dtype dt, sw_error *err);
/* The same, the weights' file written as o says (sw/save.h); a save done again notes its digest again. */
int sw_store_save_model_with(sw_store *s, const char *dir, sw_dtype dt, const sw_save_opts *o, sw_error *err);

/* The BLAKE2b-256 (hex, as sw_digest_mem of sw/audit.h) of the arena's
 * bytes, taken under the seqlock like save_model: one published version. */
int sw_store_digest(const sw_store *s, char hex[65], sw_error *err);

/* Write "shm:PREFIX-<32 hex digits>" into buf; SW_ERANGE when too small,
 * SW_EINVAL for a prefix that is not a valid name. */
int sw_store_name_random(const char *prefix, char *buf, size_t size, sw_error *err);

/* Remove this user's shm stores whose name starts with prefix (all of them
 * for NULL or "") and whose creator is no longer running; *removed (may be
 * NULL) counts them.  A companion NAME.SUFFIX stays while the store NAME has
 * a live creator (an optimiser store made by a trainer stage that has
 * exited belongs to its run).  Files in /dev/shm that are not stores are
 * left alone. */
int sw_store_sweep(const char *prefix, size_t *removed, sw_error *err);

#pragma GCC visibility pop

#endif
