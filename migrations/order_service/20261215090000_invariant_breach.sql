-- A set-based statement checks its own writes against what it planned (units moved
-- against reservations moved, orders written against sales); when they disagree it
-- calls this, which aborts the statement and its implicit transaction whole. SQLSTATE
-- OB001 says it was this check, and DETAIL carries what disagreed as JSON, so the
-- service reads the breach as a typed value instead of matching message text.
CREATE FUNCTION invariant_breach(detail JSONB) RETURNS INTEGER
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'order invariant breach' USING ERRCODE = 'OB001', DETAIL = detail::TEXT;
END
$$;
