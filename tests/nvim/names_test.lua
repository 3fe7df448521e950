-- Names in a real Neovim: K (vim.lsp.buf.hover), definition (what gd / CTRL-] call) and references (what gr /
-- grr call) on "the Detective" in a scene, with no key mapped by the plugin.
-- Env: NVIMTEST_PYTHON, NVIMTEST_OPEN (the scene), NVIMTEST_TIMEOUT_MS.
local T = SaiplingTest
local r = T.result

T.run(function()
  local timeout = tonumber(os.getenv("NVIMTEST_TIMEOUT_MS")) or 60000
  require("saipling").setup({
    cmd = { assert(os.getenv("NVIMTEST_PYTHON")), "-m", "saipling", "serve" },
    init_options = { provider = "none" },
  })
  vim.cmd.edit(vim.fn.fnameescape(assert(os.getenv("NVIMTEST_OPEN"))))
  local client = T.wait_client(timeout)
  if not client then
    return
  end
  r.status = T.wait_indexed(client, timeout)
  r.hover_provider = client.server_capabilities.hoverProvider

  vim.api.nvim_win_set_cursor(0, { 3, 6 }) -- on "Detective" in "The Detective lit a cigarette."
  -- K: the hover float
  vim.lsp.buf.hover()
  vim.wait(10000, function()
    for _, win in ipairs(vim.api.nvim_list_wins()) do
      if vim.api.nvim_win_get_config(win).relative ~= "" then
        r.hover = table.concat(vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(win), 0, -1, false), "\n")
        return true
      end
    end
    return false
  end, 50)
  for _, win in ipairs(vim.api.nvim_list_wins()) do
    if vim.api.nvim_win_get_config(win).relative ~= "" then
      vim.api.nvim_win_close(win, true)
    end
  end

  -- references into the quickfix list
  vim.lsp.buf.references(nil, {
    on_list = function(list)
      r.references = {}
      for _, item in ipairs(list.items) do
        table.insert(r.references, { file = vim.fs.normalize(item.filename), lnum = item.lnum, col = item.col })
      end
    end,
  })
  vim.wait(10000, function()
    return r.references ~= nil
  end, 50)

  -- definition: jumps to the profile
  local before = vim.api.nvim_get_current_buf()
  vim.lsp.buf.definition()
  vim.wait(10000, function()
    return vim.api.nvim_get_current_buf() ~= before
  end, 50)
  r.position = T.position()
end)
