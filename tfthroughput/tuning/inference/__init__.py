"""``tune``'s inference mode: the data ``predict`` takes, the predict runner, its workload with
the output check and the latency limit."""
