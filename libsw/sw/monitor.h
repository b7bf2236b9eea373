/*
 * sw/monitor.h - the monitors of a run: per-iteration figures checked
 * against thresholds of three levels.
 *
 * Each monitor watches one figure and has a warn, a degrade and a hard
 * threshold (any of them may be off).  sw-run logs a warning, slows the run
 * down on degrade (a smaller learning rate, or the update skipped), and on
 * hard writes a checkpoint and HALT and exits 3.  The monitors keep the
 * little history they need (the first iteration's response length, the
 * reward at the last evaluation), so they are fed every iteration in order.
 *
 * A monitor is set with a spec "NAME=WARN,DEGRADE,HARD", where a threshold
 * may be "-" (off), or "NAME=off".  Upper bounds trip when the figure is
 * above the threshold, lower bounds (entropy) when below.
 *
 * Ownership: the monitor set owns its rules and history; sw_monitor_free(NULL)
 * is a no-op.  Events written by sw_monitor_check belong to the caller.
 */
#ifndef SW_MONITOR_H
#define SW_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include "error.h"

/* What this header declares is libsw's public API, exported from libsw.so
 * (the library is compiled with -fvisibility=hidden). */
#pragma GCC visibility push(default)

typedef enum sw_mon_level { SW_MON_OK, SW_MON_WARN, SW_MON_DEGRADE, SW_MON_HARD } sw_mon_level;

/* One iteration's figures; NAN for one that was not measured (its monitor then stays quiet). */
typedef struct sw_mon_obs {
	int nonfinite;              /* count of NaN/Inf seen in losses, gradients, rewards, log-probs */
	double kl;                  /* mean KL to the reference (or to the old policy) */
	double entropy;             /* mean per-token entropy of the policy */
	double reward_mean;         /* training reward of this iteration */
	double violation_rate;      /* share of samples with a safety violation */
	double verifier_error_rate; /* share of samples a verifier failed on */
	double response_len_mean;   /* mean response length in tokens */
	double max_component_share; /* largest share of one verifier in the scores' variance; NAN if < 2 vary */
	double eval_accuracy;       /* held-out accuracy if an evaluation ran this iteration, else NAN */
} sw_mon_obs;

/* A monitor that tripped. */
typedef struct sw_mon_event {
	char name[24];              /* "kl", "entropy", "length_growth", ... */
	sw_mon_level level;
	double value, threshold;
} sw_mon_event;

typedef struct sw_monitor sw_monitor;

/* A set with the documented default thresholds (sw-run(1), MONITORS). */
sw_monitor *sw_monitor_new(void);
void sw_monitor_free(sw_monitor *m);

/* Change one monitor: "NAME=WARN,DEGRADE,HARD" or "NAME=off"; SW_EINVAL names what is wrong. */
int sw_monitor_set(sw_monitor *m, const char *spec, sw_error *err);

/* The monitors' names, NULL-terminated, for help and completion. */
const char *const *sw_monitor_names(void);

/*
 * Check one iteration.  Writes up to cap events (the tripped monitors, the
 * worst first) and sets *n to how many tripped in all; returns the worst level.
 */
sw_mon_level sw_monitor_check(sw_monitor *m, const sw_mon_obs *o, sw_mon_event *ev, size_t cap,
                              size_t *n);

const char *sw_mon_level_name(sw_mon_level l);

/* The history the monitors keep, so that a resumed run decides as the original would have. */
typedef struct sw_mon_history {
	double first_len;           /* response_len_mean of the first iteration seen, or NAN */
	double eval_reward;         /* reward_mean at the last evaluation, or NAN */
	double eval_accuracy;       /* its held-out accuracy, or NAN */
} sw_mon_history;
void sw_monitor_get_history(const sw_monitor *m, sw_mon_history *h);
void sw_monitor_set_history(sw_monitor *m, const sw_mon_history *h);

/* "kl=0.5,1,5 entropy=..." of every rule, for the run's config and audit log. */
int sw_monitor_describe(const sw_monitor *m, char *buf, size_t size);

#pragma GCC visibility pop

#endif
