"""Process reward models: the PRM head, step segments, PAV targets, data, judging, the process companion."""
