/*
 * gpu_refs: the references a CUDA runner computes on the GPU (checks/
 * <op>_ref.cu) against the host's (checks/<op>_ref.c), trial by trial: every
 * check that has both runs each seed twice, once per side, and the two
 * results must tell the same story. The kernel and its output are the same
 * both times (deterministic checks), so what may differ is the float64
 * reference in its last bits and the plain programs by a rounding here and
 * there (CUDA's expf is not glibc's): the error ratio must agree within
 * 25%, the verdict wherever the ratio is not within 25% of 1, and the
 * counts of hard failures exactly. A non-deterministic check's kernel
 * (msda.bwd's atomics) may write other bits the second time: there the
 * budgets, which only the references make, must agree within 25% instead
 * of the ratios, and the digests need not.
 *
 * usage: gpu_refs [SEEDS]   (default 200 per check x dtype)
 * Exit status: 0 agreed, 1 disagreed, 77 no GPU (ctest: skipped).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention.h"
#include "layernorm.h"
#include "msda.h"
#include "numwatch_check.h"
#include "nw_device.h"
#include "softmax.h"

/* The same check with its references on the host. Returns false if the op has no GPU references. */
static bool host_twin(const struct nw_check *c, struct nw_check *twin, void *kernels_copy)
{
	*twin = *c;
	if (strcmp(c->op, "softmax") == 0) {
		struct softmax_kernels *k = kernels_copy;

		*k = *(const struct softmax_kernels *)c->kernels;
		if (!k->refs || k->refs == &softmax_refs_host)
			return false;
		k->refs = &softmax_refs_host;
	} else if (strcmp(c->op, "attention") == 0) {
		struct attention_kernels *k = kernels_copy;

		*k = *(const struct attention_kernels *)c->kernels;
		if (!k->refs || k->refs == &attention_refs_host)
			return false;
		k->refs = &attention_refs_host;
	} else if (strcmp(c->op, "layernorm") == 0) {
		struct layernorm_kernels *k = kernels_copy;

		*k = *(const struct layernorm_kernels *)c->kernels;
		if (!k->refs || k->refs == &layernorm_refs_host)
			return false;
		k->refs = &layernorm_refs_host;
	} else if (strcmp(c->op, "msda") == 0) {
		struct msda_kernels *k = kernels_copy;

		*k = *(const struct msda_kernels *)c->kernels;
		if (!k->refs || k->refs == &msda_refs_host)
			return false;
		k->refs = &msda_refs_host;
	} else {
		return false;
	}
	twin->kernels = kernels_copy;
	return true;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double rel_gap(double a, double b)
{
	if (a == b)
		return 0.0;
	return fabs(a - b) / fmax(fabs(a), fabs(b));
}

/* Compares one seed's two trials; prints and returns false on a disagreement. */
static bool agree(const struct nw_trial *g, const struct nw_trial *h, const char *check, bool deterministic)
{
	unsigned i;

	if (g->error || h->error) {
		printf("%s %s seed %llu: error answer: gpu '%s', host '%s'\n", check, nw_dtype_name(g->dtype),
		       (unsigned long long)g->seed, g->error ? g->errmsg : "", h->error ? h->errmsg : "");
		return false;
	}
	if (g->ntensors != h->ntensors || (deterministic && g->digest != h->digest)) {
		printf("%s %s seed %llu: the kernel's output differs between the runs\n", check,
		       nw_dtype_name(g->dtype), (unsigned long long)g->seed);
		return false;
	}
	for (i = 0; i < g->ntensors; i++) {
		const struct nw_tensor_result *a = &g->tensors[i], *b = &h->tensors[i];
		bool near_one = fabs(a->ratio - 1.0) < 0.25 || fabs(b->ratio - 1.0) < 0.25;
		double gap = deterministic ? rel_gap(a->ratio, b->ratio) : rel_gap(a->budget, b->budget);

		if (a->mismatch != b->mismatch || a->unwritten != b->unwritten ||
		    a->nonfinite != b->nonfinite || a->ref_nonfinite != b->ref_nonfinite ||
		    a->excluded != b->excluded || gap > 0.25 ||
		    (!near_one && nw_tensor_failed(a) != nw_tensor_failed(b))) {
			printf(
			    "%s %s seed %llu %s: gpu ratio %.4g budget %.4g mismatch %ld ref_nonfinite %ld, "
			    "host ratio %.4g budget %.4g mismatch %ld ref_nonfinite %ld\n",
			    check, nw_dtype_name(g->dtype), (unsigned long long)g->seed, a->name, a->ratio,
			    a->budget, a->mismatch, a->ref_nonfinite, b->ratio, b->budget, b->mismatch,
			    b->ref_nonfinite);
			return false;
		}
	}
	return true;
}

static int run(const struct nw_check *c, enum nw_dtype d, uint64_t seed, struct nw_trial *t, double *sec)
{
	double t0 = now();
	int rc;

	memset(t, 0, sizeof(*t));
	t->dtype = d;
	t->seed = seed;
	t->family = -1;
	t->repeats = 1;
	rc = nw_trial_run(c, t);
	*sec += now() - t0;
	return rc;
}

int main(int argc, char **argv)
{
	const struct nw_device_info *dev = nw_dev_init();
	unsigned seeds = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 200, n, i, bad = 0, tested = 0;
	const struct nw_check *const *checks = nw_checks(&n);
	static union {
		struct softmax_kernels softmax;
		struct attention_kernels attention;
		struct layernorm_kernels layernorm;
		struct msda_kernels msda;
	} kernels_copy;

	if (!dev->available) {
		printf("skipped: no GPU (%s)\n", dev->name);
		return 77;
	}
	printf("%s, cc %s, driver %s\n", dev->name, dev->cc, dev->driver);
	printf("%-16s %-5s %6s %10s %12s %12s %8s\n", "check", "dtype", "seeds", "disagree", "trials/s gpu",
	       "trials/s host", "speedup");
	for (i = 0; i < n; i++) {
		struct nw_check twin;
		int d;

		if (!host_twin(checks[i], &twin, &kernels_copy))
			continue;
		for (d = 0; d < NW_DTYPE_COUNT; d++) {
			double gsec = 0.0, hsec = 0.0;
			unsigned s, differ = 0;

			if (!(checks[i]->dtypes & NW_DTYPE_BIT(d)))
				continue;
			for (s = 0; s < seeds; s++) {
				struct nw_trial g, h;

				run(checks[i], (enum nw_dtype)d, s, &g, &gsec);
				run(&twin, (enum nw_dtype)d, s, &h, &hsec);
				if (!agree(&g, &h, checks[i]->name, checks[i]->deterministic))
					differ++;
			}
			printf("%-16s %-5s %6u %10u %12.1f %12.1f %7.2fx\n", checks[i]->name,
			       nw_dtype_name((enum nw_dtype)d), seeds, differ, seeds / gsec, seeds / hsec,
			       hsec / gsec);
			bad += differ;
			tested++;
		}
	}
	if (tested == 0) {
		printf("no check has GPU references\n");
		return 1;
	}
	printf("%s\n",
	       bad ? "FAILED: GPU and host references disagree" : "ok: GPU and host references agree");
	return bad ? 1 : 0;
}
