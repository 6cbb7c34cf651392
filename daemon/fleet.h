/*
 * fleet: the daemons sharing one database. Each writes its own row of the
 * daemons table on a heartbeat (name, version, schema version, slots, a
 * digest of the settings every daemon must share, state), reads back the
 * live daemons whose settings or schema differ from its own and says so in
 * its log, and before every beat checks the schema: a database migrated by
 * a newer numwatchd than this one makes this one refuse to write
 * (nwd_refuse()), with a clear log line.
 */
#ifndef NW_FLEET_H
#define NW_FLEET_H

struct nwd;
struct fleet;

/* Starts the heartbeat (the first beat at once). */
int fleet_start(struct nwd *d, struct fleet **out);
/* A beat now, with the daemon's state ("draining" once it drains). */
void fleet_beat(struct fleet *f);
/* The last beat: the daemon has drained ("stopped"); no beat follows. Queued on the write connection. */
void fleet_stop(struct fleet *f);

#endif
