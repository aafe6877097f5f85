-- The W3C trace context of the request that created a payment, written by the same
-- statement that inserts the row (NULL when tracing is off). A later drive of the
-- payment, by recovery after a crash too, continues that trace.
ALTER TABLE payments ADD COLUMN traceparent TEXT NULL;
