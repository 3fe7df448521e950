return {
  fzf_exec = function(lines, opts)
    table.insert(require("stub_log").calls, { picker = "fzf-lua", prompt = opts.prompt, lines = lines })
    opts.actions["default"]({ lines[1] })
  end,
}
