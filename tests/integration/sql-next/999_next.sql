-- The migration of a release newer than this tree: numwatchd-next carries it
-- (tests/integration/CMakeLists.txt), so that a test can migrate a database
-- past what numwatchd knows, as an upgrade of one host would.
CREATE TABLE next_release (id int PRIMARY KEY);
