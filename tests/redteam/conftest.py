collect_ignore_glob = ["scenarios/*"]  # inputs for the tests here, not scenarios to run
