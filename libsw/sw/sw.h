/* sw/sw.h - the whole public interface of libsw. */
#ifndef SW_SW_H
#define SW_SW_H
#include "error.h"
#include "save.h"
#include "record.h"
#include "stream.h"
#include "monitor.h"
#include "backend.h"
#include "model.h"
#include "engine.h"
#include "tokenizer.h"
#include "store.h"
#include "audit.h"
#include "run.h"
#include "balance.h"
#include "cost.h"
#include "pool.h"
#include "plot.h"
#include "rl.h"
#include "verify.h"
#include "sampler.h"
#include "sample.h"
#include "image.h"
#include "rollout.h"
#include "dist.h"
/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

#define SW_VERSION "0.1.0"
const char *sw_version(void);
#pragma GCC visibility pop

#endif
