-- A done bisection is final (issue 16). bisection_save() (040) saves a step
-- over the bisection whose step number it read, and the bisector read a
-- bisection by id whatever its state: with four daemons, one finished a
-- bisection between another's list of running ones and its read, and the
-- other's step opened it again (a confirmed culprit re-tested; the culprit
-- mail queued meanwhile took no culprit_id). The bisector no longer reads a
-- done one; here the database refuses to open one again, whoever asks.
-- (Its outcome may still change: a culprit withdrawn afterwards.)
CREATE FUNCTION bisections_stay_done() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'bisection % is done: a done bisection is final (it cannot become %)', OLD.id, NEW.state;
END
$$;

CREATE TRIGGER bisections_stay_done BEFORE UPDATE ON bisections FOR EACH ROW
	WHEN (OLD.state = 'done' AND NEW.state IS DISTINCT FROM 'done') EXECUTE FUNCTION bisections_stay_done();
