/*
 * builder: claims "build" jobs and builds each commit in its own git worktree
 * with the configured command, under a deadline, capturing a capped log. A
 * successful build is hashed (the runner binaries: commits whose binaries did
 * not change can be skipped later) and its runners asked for the checks they
 * offer; one "trials" job per check x dtype is queued. A failed build is
 * stored as build_failed with its log.
 *
 * Builds are per host: a host runs only runners it built itself. When this
 * host's slots wait for work and the work there is belongs to commits built
 * elsewhere first, the builder builds the most urgent of them here too
 * (host_build_next(), sql/040) and records whether its runners are
 * byte-identical to the first build's (host_builds): only then do this
 * host's slots claim the commit's jobs.
 */
#ifndef NW_BUILDER_H
#define NW_BUILDER_H

struct nwd;
struct builder;

int builder_start(struct nwd *d, struct builder **out);
void builder_kick(struct builder *b);
/* Stop claiming; a build in flight is killed and its job given back. */
void builder_drain(struct builder *b);
/* Whether a build is running, and of which commit ("" when idle). */
const char *builder_current(const struct builder *b);
/* This host's build of the commit is gone (its runner is missing): it is built here again before its jobs run here. */
void builder_forget(struct nwd *d, long long commit_id);

#endif
