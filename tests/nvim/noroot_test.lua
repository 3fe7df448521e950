-- A file with no root marker above it, outside Neovim's working directory: no server starts, the user is told
-- why, and nothing is written next to the file.
-- Env: NVIMTEST_PYTHON, NVIMTEST_OPEN.
local T = SaiplingTest
local r = T.result
T.run(function()
  local saipling = require("saipling")
  saipling.setup({
    cmd = { assert(os.getenv("NVIMTEST_PYTHON")), "-m", "saipling", "serve" },
    init_options = { provider = "none" },
  })
  vim.cmd.edit(vim.fn.fnameescape(assert(os.getenv("NVIMTEST_OPEN"))))
  r.filetype = vim.bo.filetype
  local root, how = saipling.find_root(vim.api.nvim_buf_get_name(0))
  r.find_root = { root = root, how = how }
  vim.wait(1500, function()
    return #vim.lsp.get_clients({ name = "saipling" }) > 0
  end, 50)
  r.clients = #vim.lsp.get_clients({ name = "saipling" })
  local fname = vim.api.nvim_buf_get_name(0)
  vim.cmd("checkhealth saipling")
  r.health = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  -- root_fallback = "file" brings the old behaviour back, on request.
  require("saipling.config").options.root_fallback = "file"
  r.file_fallback_root = saipling.find_root(fname)
end)
