# a table as it comes: a text id (customer_id), text categories (plan, region), a boolean
# (paperless) and blank cells (usage, region); nothing to encode or impute first
neurcam fit --input docs/examples/customers.csv --n-clusters 3 --id customer_id --report --output runs/customers
# score rows (here the same file) in this process, into a CSV with fit's columns
neurcam predict --model runs/customers/model --input docs/examples/customers.csv --id customer_id --output runs/customers-scored.csv
# one row's terms and the smallest change that moves it to another cluster
neurcam explain --model runs/customers/model --input docs/examples/customers.csv --id customer_id --show C000017 --output runs/customers-rows
# the model as one SQL query for the warehouse, its agreement measured in SQLite (and DuckDB)
neurcam export --model runs/customers/model --input docs/examples/customers.csv --table customers --output runs/customers.sql
