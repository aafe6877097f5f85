-- Whether a step's outcome was settled by a status query after the call itself went
-- unanswered: the step records the query's outcome, and this keeps the fact that the
-- call's own answer was lost (the fault evidence counts such calls).
ALTER TABLE payment_steps ADD COLUMN settled_by_query BOOLEAN NOT NULL DEFAULT FALSE;
