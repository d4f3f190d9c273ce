-- Frozen: the run outcome triggers as migration 0013 installs them. Never edit:
-- the current text is jobs/sql/alerts.sql.
CREATE CONSTRAINT TRIGGER jobs_run_outcome_alerts AFTER UPDATE OF status ON jobs_jobrun
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status NOT IN ('scheduled', 'running'))
    EXECUTE FUNCTION jobs_run_outcome_alerts();
CREATE CONSTRAINT TRIGGER jobs_run_recorded_alerts AFTER INSERT ON jobs_jobrun
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.status IN ('failed', 'missed', 'lost')
          OR (NEW.status = 'running' AND NEW.trigger = 'continuous'))
    EXECUTE FUNCTION jobs_run_outcome_alerts();
