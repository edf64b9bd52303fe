"""Where a request goes: the route its model picks, that route's upstream and rules, and how
they read to an operator."""
