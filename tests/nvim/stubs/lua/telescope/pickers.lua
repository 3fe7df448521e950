local M = {}
function M.new(_, spec)
  local log = require("stub_log")
  return {
    find = function()
      local entries = vim.tbl_map(spec.finder.entry_maker, spec.finder.results)
      table.insert(log.calls, { picker = "telescope", title = spec.prompt_title, entries = vim.tbl_map(function(e)
        return { display = e.display, filename = e.filename, lnum = e.lnum }
      end, entries) })
      M._selected = entries[1]
      assert(spec.attach_mappings(1, function() end) == true)
      require("telescope.actions").select_default.fn()
    end,
  }
end
return M
