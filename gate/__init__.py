"""gate: MySQL/MariaDB change-data-capture into a datacenter database."""
