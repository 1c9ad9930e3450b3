"""kspec: the command line that ties the packages together (`kspec --help`)."""
