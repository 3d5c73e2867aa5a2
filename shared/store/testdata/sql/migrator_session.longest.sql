/* migrate: session */
SET statement_timeout = 900000; SET lock_timeout = 2000
