"""Stand-in for the `shinka` package inside a folder task's scorer sandbox (see compat/)."""
