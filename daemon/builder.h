/*
 * builder: claims "build" jobs and builds each commit in its own git worktree
 * with the configured command, under a deadline, capturing a capped log. A
 * successful build is hashed (the runner binaries: commits whose binaries did
 * not change can be skipped later) and its runner asked for the checks it
 * offers; one "trials" job per check x dtype is queued. A failed build is
 * stored as build_failed with its log.
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

#endif
