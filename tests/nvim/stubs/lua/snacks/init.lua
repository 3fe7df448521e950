local picker = {}
function picker.pick(opts)
  table.insert(require("stub_log").calls, { picker = "snacks", title = opts.title, items = vim.tbl_map(function(i)
    return { text = opts.format(i)[1][1], file = i.file, pos = i.pos }
  end, opts.items) })
  opts.confirm({ close = function() end }, opts.items[1])
end
return { picker = picker }
