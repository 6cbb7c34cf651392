/*
 * judge: a commit's verdict for one check x dtype, from its plan's results
 * and the state just before it (PRODUCT.md "Verdicts and statistics").
 *
 * The baseline is the nearest earlier commit with a final verdict
 * (judge_baseline(), sql/007); its results for the same seeds are paired
 * with the candidate's where both ran the same case (the runner's case
 * digest); stats_verdict() says what the commit changed; judge_record()
 * (sql/007) stores the verdict, keeps the regressions (new, still open,
 * fixed, withdrawn) and queues a later commit judged against another
 * baseline to be judged again, in one transaction with the job's end.
 */
#ifndef NW_JUDGE_H
#define NW_JUDGE_H

#include <stdbool.h>

#include "stats.h"

struct nwd;
struct job;

enum judge_result {
	JUDGE_DONE,       /* the verdict is stored and the job done */
	JUDGE_NOT_STORED, /* some planned seed has no stored result yet: try again shortly */
	JUDGE_MORE,       /* the evidence is ambiguous: run 'more' further seeds, then judge again */
	JUDGE_REQUEUED,   /* the baseline lacks seeds: a probe runs them there, the job waits */
	JUDGE_FAILED,     /* the database or memory failed: give the job back */
};

typedef void (*judge_cb)(void *data, enum judge_result result, unsigned more);

/*
 * Judges 'job' (a trials job of its plan). 'seeds' are the candidate's
 * results in seed order (cand_* filled, borrowed until 'cb' runs), 'planned'
 * the plan's size, 'worst' the highest ratio of any run, 'infra_failed'
 * whether the job gave up on infrastructure faults. 'cb' runs exactly once
 * (unless this returns an error).
 */
int judge_verdict(struct nwd *d, const struct job *job, const struct stats_seed *seeds, unsigned planned,
		  double worst, bool infra_failed, judge_cb cb, void *data);

#endif
