return {
  new_table = function(t)
    assert(type(t.results) == "table" and type(t.entry_maker) == "function")
    return t
  end,
}
