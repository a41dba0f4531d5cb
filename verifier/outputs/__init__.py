"""What a run leaves behind for people: counterexample dumps (`dump`), figures (`plots`) and the
HTML report of a run, a sweep or a dump (`report`)."""
