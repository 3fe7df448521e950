-- End to end against the real server: open a fixture file, wait for the index,
-- :SaiplingSearch through vim.ui.select, record where the cursor lands.
-- Env: NVIMTEST_PYTHON, NVIMTEST_OPEN (file to open), NVIMTEST_QUERY,
--      NVIMTEST_TIMEOUT_MS (index wait).
local T = SaiplingTest
local r = T.result
local t0 = vim.uv.hrtime()
local function elapsed()
  return math.floor((vim.uv.hrtime() - t0) / 1e6)
end
local function mark(step)
  r.steps = r.steps or {}
  table.insert(r.steps, { step = step, ms = elapsed() })
end

-- The server process ended (Neovim notifies "Client saipling quit with exit code ..."): stop waiting.
local function server_quit()
  for _, n in ipairs(r.notifications) do
    if n.msg:find("quit with exit code", 1, true) then
      return true
    end
  end
  return false
end

T.run(function()
  local timeout = tonumber(os.getenv("NVIMTEST_TIMEOUT_MS")) or 60000
  local saipling = require("saipling")
  saipling.setup({
    cmd = { assert(os.getenv("NVIMTEST_PYTHON")), "-m", "saipling", "serve" },
    init_options = { provider = "none" },
  })
  r.progress = {}
  vim.api.nvim_create_autocmd("LspProgress", {
    callback = function(ev)
      local v = ev.data.params.value or {}
      table.insert(r.progress, { kind = v.kind, title = v.title, message = v.message, percentage = v.percentage })
    end,
  })
  vim.cmd.edit(vim.fn.fnameescape(assert(os.getenv("NVIMTEST_OPEN"))))
  r.filetype = vim.bo.filetype

  local client
  r.attached = vim.wait(timeout, function()
    client = vim.lsp.get_clients({ bufnr = 0, name = "saipling" })[1]
    return (client ~= nil and client.initialized == true) or server_quit()
  end, 50)
  mark("attached")
  if not r.attached or server_quit() then
    r.error = server_quit() and "the server quit (see lsp.log)" or "the saipling client did not attach"
    return
  end
  r.root_dir = client.root_dir

  -- Poll saipling/status until the index has files and is not indexing.
  local status, pending, reindexed = nil, false, false
  local function poll()
    if pending then
      return
    end
    pending = true
    local function handler(err, res)
      pending = false
      if err then
        r.status_error = err
      else
        status = res
      end
    end
    if vim.fn.has("nvim-0.11") == 1 then
      client:request("saipling/status", vim.empty_dict(), handler, 0)
    else
      client.request("saipling/status", vim.empty_dict(), handler, 0)
    end
  end
  r.indexed = vim.wait(timeout, function()
    poll()
    if status and (status.totalFiles or 0) == 0 and not status.isIndexing and not reindexed and elapsed() > 15000 then
      -- The server did not index on its own: ask once (recorded, so the report can say so).
      reindexed = true
      r.reindex_requested_at_ms = elapsed()
      saipling.reindex()
    end
    return (status ~= nil and (status.totalFiles or 0) > 0 and not status.isIndexing) or server_quit()
  end, 200)
  r.status = status
  mark("indexed")
  if not r.indexed or server_quit() then
    r.error = server_quit() and "the server quit (see lsp.log)" or "the index did not become ready"
    return
  end

  T.auto_select()
  local before = vim.api.nvim_get_current_buf()
  vim.cmd("SaiplingSearch " .. assert(os.getenv("NVIMTEST_QUERY")))
  r.jumped = vim.wait(20000, function()
    return r.select_items ~= nil and vim.api.nvim_get_current_buf() ~= before
  end, 50)
  mark("searched")
  r.position = T.position()
end)
