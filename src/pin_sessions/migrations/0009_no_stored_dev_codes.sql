-- SPEC §3: the sign-in code itself is never stored. A dev server now derives each code
-- from its request id under a key of the server secret and derives it again to show it,
-- so the table that kept dev codes readable goes.

drop table identity.dev_sign_in_codes;
