"""The cluster scheduler that runs in every beat, and the rows it reads."""
