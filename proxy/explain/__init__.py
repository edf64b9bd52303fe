"""`streamfix explain`: a recorded exchange, the upstream's events beside the client's, each
change labelled with the repair that made it."""
