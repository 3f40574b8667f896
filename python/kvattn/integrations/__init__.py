"""kvattn inside other libraries' attention interfaces (import the submodule you need; each imports its host
library only when used)."""
