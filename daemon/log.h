/*
 * log: lines on stderr. Under systemd (JOURNAL_STREAM set) each line carries a
 * "<N>" syslog priority prefix for journald instead of a timestamp. Lines name
 * the object they concern: "build 3f2a1c: ...", "slot gpu0: ...".
 */
#ifndef NW_LOG_H
#define NW_LOG_H

enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

void log_set_level(enum log_level level);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
