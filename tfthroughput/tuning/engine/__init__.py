"""The one search both modes of ``tune`` run: the baseline, one trial at a time against it in
alternated rounds judged by the paired rule, the best so far, the budget, the confirmation."""
