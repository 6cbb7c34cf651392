-- One "fixed" follow-up per culprit and fixing commit (mails per culprit: one thread, not one
-- reply per check x dtype). A culprit with six regressions fixed by one commit got six replies;
-- now the first of them by check and dtype speaks for all six, once the fixing commit is judged
-- for every check x dtype the culprit still had open (sql/queries/mail_sweep.sql).
ALTER TABLE mail ADD COLUMN fixed_commit_id bigint REFERENCES commits (id);
CREATE UNIQUE INDEX mail_one_fixed_per_fix ON mail (culprit_id, fixed_commit_id) WHERE kind = 'fixed';
