-- Mentions and name diagnostics in a real Neovim: :SaiplingMentions NAME fills the quickfix list; the server's
-- diagnostics for a drifting name and a name without a page reach vim.diagnostic; the quick fixes are offered
-- through Neovim's own code action request.
-- Env: NVIMTEST_PYTHON, NVIMTEST_OPEN (a scene), NVIMTEST_TIMEOUT_MS.
local T = SaiplingTest
local r = T.result

T.run(function()
  local timeout = tonumber(os.getenv("NVIMTEST_TIMEOUT_MS")) or 60000
  require("saipling").setup({
    cmd = { assert(os.getenv("NVIMTEST_PYTHON")), "-m", "saipling", "serve" },
    init_options = { provider = "none" },
  })
  vim.cmd.edit(vim.fn.fnameescape(assert(os.getenv("NVIMTEST_OPEN"))))
  local bufnr = vim.api.nvim_get_current_buf()
  local client = T.wait_client(timeout)
  if not client then
    return
  end
  r.status = T.wait_indexed(client, timeout)

  -- diagnostics: published after the first index run
  vim.wait(timeout, function()
    return #vim.diagnostic.get(bufnr) >= 2
  end, 50)
  r.diagnostics = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    table.insert(r.diagnostics, {
      lnum = d.lnum,
      col = d.col,
      end_col = d.end_col,
      severity = d.severity,
      source = d.source,
      code = d.code,
      message = d.message,
    })
  end

  -- quick fixes at the drifting word, as `vim.lsp.buf.code_action()` asks for them
  local drift
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    if d.code == "name-drift" then
      drift = d
    end
  end
  if drift then
    local params = {
      textDocument = { uri = vim.uri_from_bufnr(bufnr) },
      range = { start = { line = drift.lnum, character = drift.col }, ["end"] = { line = drift.lnum, character = drift.end_col } },
      context = { diagnostics = { drift.user_data and drift.user_data.lsp or {} } },
    }
    local replies = vim.lsp.buf_request_sync(bufnr, "textDocument/codeAction", params, 10000) or {}
    r.actions = {}
    for _, reply in pairs(replies) do
      for _, action in ipairs(reply.result or {}) do
        table.insert(r.actions, action.title)
      end
    end
  end

  -- :SaiplingMentions NAME into the quickfix list
  local done = false
  local mentions = require("saipling").mentions
  require("saipling").mentions = function(name, opts)
    opts = opts or {}
    opts.cb = function()
      done = true
    end
    return mentions(name, opts)
  end
  vim.cmd("SaiplingMentions Mina")
  vim.wait(15000, function()
    return done
  end, 50)
  local qf = vim.fn.getqflist({ title = 1, items = 1 })
  r.qf_title = qf.title
  r.qf = {}
  for _, item in ipairs(qf.items) do
    table.insert(r.qf, {
      file = vim.fs.normalize(vim.api.nvim_buf_get_name(item.bufnr)),
      lnum = item.lnum,
      col = item.col,
      text = item.text,
    })
  end
  r.qf_open = vim.fn.getqflist({ winid = 1 }).winid ~= 0
end)
