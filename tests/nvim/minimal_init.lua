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

--- The server process ended (Neovim notifies "Client saipling quit with exit code ..."): stop waiting.
function SaiplingTest.server_quit()
  for _, n in ipairs(SaiplingTest.result.notifications) do
    if n.msg:find("quit with exit code", 1, true) then
      return true
    end
  end
  return false
end

--- The initialized saipling client of the current buffer, or nil (and result.error set) after `timeout` ms.
function SaiplingTest.wait_client(timeout)
  local client
  vim.wait(timeout, function()
    client = vim.lsp.get_clients({ bufnr = 0, name = "saipling" })[1]
    return (client ~= nil and client.initialized == true) or SaiplingTest.server_quit()
  end, 50)
  if not client or not client.initialized then
    SaiplingTest.result.error = SaiplingTest.server_quit() and "the server quit (see lsp.log)"
      or "the saipling client did not attach"
    return nil
  end
  return client
end

--- A request through `client`, waited for; returns result, err.
function SaiplingTest.request(client, method, params, timeout)
  local done, result, err = false, nil, nil
  local function handler(e, res)
    done, result, err = true, res, e
  end
  if vim.fn.has("nvim-0.11") == 1 then
    client:request(method, params, handler, 0)
  else
    client.request(method, params, handler, 0)
  end
  vim.wait(timeout or 20000, function()
    return done
  end, 20)
  return result, err
end

--- Wait until `saipling/status` says files are indexed and nothing is indexing; returns the status.
function SaiplingTest.wait_indexed(client, timeout)
  local status
  vim.wait(timeout, function()
    status = SaiplingTest.request(client, "saipling/status", vim.empty_dict(), 5000)
    return (status ~= nil and (status.totalFiles or 0) > 0 and not status.isIndexing) or SaiplingTest.server_quit()
  end, 200)
  return status
end
