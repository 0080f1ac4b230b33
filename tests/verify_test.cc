// Tests of dsfs verify against reads (tools/cmd_inspect.cc): being written.
