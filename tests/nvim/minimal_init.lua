-- Isolated init for the headless tests: only the plugin under test on the runtimepath.
-- Run as: nvim --headless --clean -u tests/nvim/minimal_init.lua ...
local plugin = assert(os.getenv("NVIMTEST_PLUGIN"), "NVIMTEST_PLUGIN is not set")
vim.opt.runtimepath:prepend(plugin)
vim.opt.swapfile = false
vim.opt.shadafile = "NONE"
vim.opt.more = false

-- Helpers shared by the test scripts.
_G.SaiplingTest = {
  result = { notifications = {} },
}

-- Record notifications instead of showing them (they become part of the JSON result).
vim.notify = function(msg, level)
  table.insert(SaiplingTest.result.notifications, { msg = tostring(msg), level = level })
end

--- Write the result table as JSON to $NVIMTEST_OUT and quit.
function SaiplingTest.finish()
  local out = assert(os.getenv("NVIMTEST_OUT"), "NVIMTEST_OUT is not set")
  local ok, encoded = pcall(vim.json.encode, SaiplingTest.result)
  if not ok then
    encoded = vim.json.encode({ error = "could not encode result: " .. tostring(encoded) })
  end
  vim.fn.writefile({ encoded }, out)
  vim.cmd("qa!")
end

--- Run `fn` catching errors into result.error, then finish.
function SaiplingTest.run(fn)
  local ok, err = xpcall(fn, debug.traceback)
  if not ok then
    SaiplingTest.result.error = tostring(err)
  end
  SaiplingTest.finish()
end

--- Replace vim.ui.select with one that records the shown items and picks the first.
function SaiplingTest.auto_select()
  local r = SaiplingTest.result
  vim.ui.select = function(items, opts, on_choice)
    r.select_prompt = opts and opts.prompt
    r.select_items = {}
    for i, item in ipairs(items) do
      r.select_items[i] = opts and opts.format_item and opts.format_item(item) or tostring(item)
    end
    r.first_item = items[1]
    on_choice(items[1], items[1] and 1 or nil)
  end
end

--- Where the cursor is now.
function SaiplingTest.position()
  return {
    bufname = vim.fs.normalize(vim.api.nvim_buf_get_name(0)),
    line = vim.api.nvim_win_get_cursor(0)[1],
  }
end
