"""Stand-in for the `openevolve` package inside a folder task's scorer sandbox (see compat/)."""
