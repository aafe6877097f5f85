-- Who may take part in a product's drop. accounts_created_before: only members who
-- signed up before this moment may take a pass or join the waitlist (accounts made
-- after the drop was announced cannot); NULL: every member.
ALTER TABLE products ADD COLUMN accounts_created_before TIMESTAMPTZ;
