/* test_monitor.c - the run's monitors: defaults, specs, levels, history. */
#include <math.h>
#include "sw/sw.h"
#include "sw/monitor.h"
#include "tap.h"

static sw_mon_obs quiet_(void)
{
	sw_mon_obs o = { 0, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN };
	return o;
}

int main(void)
{
	sw_error err = { 0 };
	sw_mon_event ev[8];
	size_t n;
	sw_monitor *m = sw_monitor_new();
	ok(m != NULL, "a monitor set with the defaults");

	sw_mon_obs o = quiet_();
	is_int(sw_monitor_check(m, &o, ev, 8, &n), SW_MON_OK, "nothing measured: nothing trips");
	is_int(n, 0, "no events");

	o.nonfinite = 3;
	is_int(sw_monitor_check(m, &o, ev, 8, &n), SW_MON_HARD, "a NaN halts by default");
	ok(n == 1 && !strcmp(ev[0].name, "nonfinite") && ev[0].value == 3, "the event names the monitor");

	o = quiet_();
	o.verifier_error_rate = 0.03;
	is_int(sw_monitor_check(m, &o, ev, 8, &n), SW_MON_WARN, "3%% verifier errors warn");
	o.verifier_error_rate = 0.1;
	is_int(sw_monitor_check(m, &o, ev, 8, &n), SW_MON_DEGRADE, "10%% degrade");
	o.verifier_error_rate = 0.5;
	is_int(sw_monitor_check(m, &o, ev, 8, &n), SW_MON_HARD, "50%% halt");
	ok(ev[0].threshold == 0.2, "the event carries the threshold it crossed");

	/* lower bounds trip below */
	o = quiet_();
	o.entropy = 0.02;
	is_int(sw_monitor_check(m, &o, ev, 8, &n), SW_MON_WARN, "entropy collapsing warns");
	o.entropy = 0.5;
	is_int(sw_monitor_check(m, &o, ev, 8, &n), SW_MON_OK, "healthy entropy is quiet");

	/* length growth against the first iteration */
	sw_monitor *g = sw_monitor_new();
	o = quiet_();
	o.response_len_mean = 10;
	is_int(sw_monitor_check(g, &o, ev, 8, &n), SW_MON_OK, "the first iteration sets the base length");
	o.response_len_mean = 25;
	is_int(sw_monitor_check(g, &o, ev, 8, &n), SW_MON_WARN, "2.5x the length warns");
	o.response_len_mean = 60;
	is_int(sw_monitor_check(g, &o, ev, 8, &n), SW_MON_HARD, "6x the length halts");
	ok(fabs(ev[0].value - 6) < 1e-12, "the figure is the growth ratio");

	/* the reward-hacking sign needs two evaluations */
	sw_monitor *h = sw_monitor_new();
	o = quiet_();
	o.reward_mean = 0.2;
	o.eval_accuracy = 0.6;
	is_int(sw_monitor_check(h, &o, ev, 8, &n), SW_MON_OK, "the first evaluation only records");
	o.reward_mean = 0.5;
	o.eval_accuracy = NAN;
	is_int(sw_monitor_check(h, &o, ev, 8, &n), SW_MON_OK, "no evaluation, no hacking figure");
	o.reward_mean = 0.8;
	o.eval_accuracy = 0.45;
	is_int(sw_monitor_check(h, &o, ev, 8, &n), SW_MON_DEGRADE, "reward up while held-out accuracy fell 15 points");
	ok(fabs(ev[0].value - 0.15) < 1e-12 && !strcmp(ev[0].name, "reward_hacking"), "named, with the fall");
	o.reward_mean = 0.7;
	o.eval_accuracy = 0.3;
	is_int(sw_monitor_check(h, &o, ev, 8, &n), SW_MON_OK, "both falling is not hacking");

	/* history round trip: a resumed set decides as the original */
	sw_mon_history hist;
	sw_monitor_get_history(g, &hist);
	sw_monitor *g2 = sw_monitor_new();
	sw_monitor_set_history(g2, &hist);
	o = quiet_();
	o.response_len_mean = 35;
	sw_mon_level a = sw_monitor_check(g, &o, ev, 8, &n), b = sw_monitor_check(g2, &o, ev, 8, &n);
	ok(a == b && a == SW_MON_DEGRADE, "a set given the history decides the same");

	/* specs */
	is_int(sw_monitor_set(m, "kl=0.1,0.2,0.3", &err), 0, "set kl");
	o = quiet_();
	o.kl = 0.25;
	is_int(sw_monitor_check(m, &o, ev, 8, &n), SW_MON_DEGRADE, "the new kl thresholds apply");
	is_int(sw_monitor_set(m, "kl=-,-,0.3", &err), 0, "'-' turns a level off");
	is_int(sw_monitor_check(m, &o, ev, 8, &n), SW_MON_OK, "only the hard level is left");
	is_int(sw_monitor_set(m, "kl=off", &err), 0, "off");
	o.kl = 100;
	is_int(sw_monitor_check(m, &o, ev, 8, &n), SW_MON_OK, "an off monitor never trips");
	is_int(sw_monitor_set(m, "bogus=1,2,3", &err), SW_EINVAL, "an unknown monitor");
	ok(strstr(err.msg, "'bogus'") != NULL, "is named: %s", err.msg);
	is_int(sw_monitor_set(m, "kl=1,2", &err), SW_EINVAL, "two thresholds");
	is_int(sw_monitor_set(m, "kl=1,2,x", &err), SW_EINVAL, "a threshold that is no number");
	is_int(sw_monitor_set(m, "kl=3,2,1", &err), SW_EINVAL, "levels out of order");
	ok(strstr(err.msg, "rise") != NULL, "says they must rise: %s", err.msg);
	is_int(sw_monitor_set(m, "entropy=0.1,0.2,0.3", &err), SW_EINVAL, "a lower bound's levels must fall");
	is_int(sw_monitor_set(m, "kl", &err), SW_EINVAL, "no '='");

	char buf[512];
	is_int(sw_monitor_describe(m, buf, sizeof buf), 0, "describe");
	ok(strstr(buf, "kl=-,-,-") && strstr(buf, "verifier_errors=0.01,0.05,0.2"), "lists every rule: %s", buf);

	/* several trip: the worst first */
	sw_monitor *w = sw_monitor_new();
	o = quiet_();
	o.violation_rate = 0.3;
	o.nonfinite = 1;
	is_int(sw_monitor_check(w, &o, ev, 8, &n), SW_MON_HARD, "the worst level wins");
	ok(n == 2 && ev[0].level == SW_MON_HARD && ev[1].level == SW_MON_WARN, "events ordered worst first");

	sw_monitor_free(m);
	sw_monitor_free(g);
	sw_monitor_free(g2);
	sw_monitor_free(h);
	sw_monitor_free(w);
	sw_monitor_free(NULL);
	return tap_done();
}
