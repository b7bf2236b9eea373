/*
 * test_plot.c - the small multiples of sw/plot.h: a plot of a small
 * metrics file is well-formed SVG (xmllint, where installed, says so; the
 * tags balance either way) with a panel for each metric present and a
 * point for each value; bad records are errors naming the field.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sw/sw.h"
#include "sw/plot.h"
#include "rec.h"
#include "tap.h"

static const char *metrics_[] = {
	"{\"iter\":0,\"reward_mean\":0.1,\"accuracy\":0.2,\"kl\":0.01,\"rewards\":{\"math\":1,\"safe<&>\":0.5}}",
	"{\"iter\":2,\"reward_mean\":0.3,\"accuracy\":0.4,\"kl\":0.02,\"rewards\":{\"math\":0.5}}",
	"{\"iter\":1,\"reward_mean\":0.2,\"entropy\":{\"$f64\":\"nan\"}}",
	"{\"iter\":2,\"eval\":true,\"accuracy\":0.5}",
};

static size_t count_(const char *s, const char *what)
{
	size_t n = 0;
	for (const char *p = s; (p = strstr(p, what)); p += strlen(what))
		n++;
	return n;
}

static void test_svg(void)
{
	sw_error err = { 0 };
	sw_plot *p = sw_plot_new();
	ok(p && sw_plot_empty(p), "a new plot has nothing to draw");
	ok(sw_plot_run(p, "runs/a&b", &err) == 0, "a run");
	for (size_t i = 0; i < sizeof metrics_ / sizeof *metrics_; i++) {
		sw_rec *r = json_rec(metrics_[i]);
		ok(sw_plot_add(p, r, &err) == 0, "record %zu (%s)", i + 1, err.msg);
		sw_rec_free(r);
	}
	ok(!sw_plot_empty(p), "now it has");
	is_int(sw_plot_points(p), 8, "3 reward means, 2 + 1 accuracies, 2 KLs; the nan not drawn, the maps not counted");
	char *svg = NULL;
	size_t len = 0;
	ok(sw_plot_svg(p, NULL, &svg, &len, &err) == 0 && svg && len == strlen(svg), "drawn (%zu bytes)", len);
	if (!svg)
		return;
	ok(!strncmp(svg, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg ", 44) && strstr(svg, "</svg>\n"),
	   "an SVG document");
	ok(strstr(svg, "<title>runs/a&amp;b</title>") != NULL, "titled with the run's name, escaped");
	ok(count_(svg, "<g class=\"panel\"") == 5, "a panel each: reward_mean, rewards, accuracy, kl, entropy (%zu)",
	   count_(svg, "<g class=\"panel\""));
	ok(strstr(svg, "id=\"panel-reward_mean\"") && strstr(svg, "id=\"panel-rewards\"") &&
	   strstr(svg, "id=\"panel-accuracy\"") && strstr(svg, "id=\"panel-kl\"") && strstr(svg, "id=\"panel-entropy\"") &&
	   !strstr(svg, "id=\"panel-violation_rate\""), "the panels of the metrics present, no other");
	ok(strstr(svg, "data-metric=\"reward_mean\" fill=\"none\"") &&
	   strstr(svg, "points=\"") && count_(svg, "class=\"eval-point\"") == 1, "the series as lines, the evaluation a point");
	ok(strstr(svg, "<title>iter 1: 0.2</title>") != NULL, "out-of-order records sorted by iteration");
	ok(strstr(svg, "1 non-finite value not drawn") != NULL, "the nan is counted on its panel");
	ok(strstr(svg, "safe&lt;&amp;&gt;") != NULL, "a verifier's name escaped in the key");
	/* the tags balance: every <g> closed, no stray < from data */
	ok(count_(svg, "<g ") + count_(svg, "<g>") == count_(svg, "</g>"), "groups balance");
	/* and xmllint, where it is installed, reads it */
	char path[] = "/tmp/test_plot.XXXXXX";
	int fd = mkstemp(path);
	if (fd >= 0) {
		FILE *f = fdopen(fd, "w");
		fwrite(svg, 1, len, f);
		fclose(f);
		char cmd[128];
		snprintf(cmd, sizeof cmd, "command -v xmllint >/dev/null || exit 0; xmllint --noout %s", path);
		ok(system(cmd) == 0, "well-formed XML (xmllint)");
		unlink(path);
	}
	free(svg);
	ok(sw_plot_svg(p, "my <title>", &svg, &len, &err) == 0 && strstr(svg, "<title>my &lt;title&gt;</title>"),
	   "a given title, escaped");
	free(svg);
	sw_plot_free(p);
	sw_plot_free(NULL);
}

static void test_errors(void)
{
	static const struct {
		const char *json, *msg;
	} cases[] = {
		{ "{\"reward_mean\":1}", "no field 'iter'" },
		{ "{\"iter\":\"x\"}", "field 'iter' is a string, not a number" },
		{ "{\"iter\":1,\"kl\":[1]}", "field 'kl' is an array, not a number" },
		{ "{\"iter\":1,\"eval\":1}", "field 'eval' is a number, not true or false" },
		{ "{\"iter\":1,\"rewards\":{\"a\":\"b\"}}", "field 'rewards': 'a' is a string, not a number" },
		{ "{\"iter\":1,\"time_s\":3}", "field 'time_s' is a number, not a map of stage to seconds" },
	};
	sw_error err = { 0 };
	sw_plot *p = sw_plot_new();
	ok(sw_plot_add(p, NULL, &err) == SW_EINVAL, "no run yet: SW_EINVAL");
	sw_plot_run(p, "x", &err);
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		sw_rec *r = json_rec(cases[i].json);
		memset(&err, 0, sizeof err);
		ok(sw_plot_add(p, r, &err) < 0 && !strcmp(err.msg, cases[i].msg), "%s: %s", cases[i].json, err.msg);
		sw_rec_free(r);
	}
	sw_plot_free(p);
}

int main(void)
{
	test_svg();
	test_errors();
	return tap_done();
}
