"""Process reward models: the PRM, step segments, PAV targets, data, judging, process rewards."""
